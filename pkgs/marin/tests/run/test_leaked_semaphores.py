"""A run whose data steps ran at a TPU host's parallelism ends without multiprocessing's
``resource_tracker: There appear to be N leaked semaphore objects`` warning.

A 13-core host runs a data step's shards in up to 13 worker processes. Each worker that made a
semaphore (tqdm makes one for its first progress bar, as Hugging Face's libraries show them) and
ended with ``os._exit`` left it to the run's resource tracker, which warned once the run ended
(``fray.process_exit``). Here a data step's function runs in a fresh interpreter, as in its own
process, whose ``os.cpu_count`` says 13.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from marin.execution.core.identity import workspace_root

HOST_CPUS = 13
"""The TPU v5e host's cores (the host the warning was seen on)."""

_SITE = f'''
import os
os.cpu_count = lambda: {HOST_CPUS}
os.sched_getaffinity = lambda pid: set(range({HOST_CPUS}))
'''

_STEPS = '''
import os

import tqdm
from zephyr import Dataset
from zephyr.writers import JsonlSink


def _shard_record(i):
    for _ in tqdm.tqdm(range(2), disable=True):  # a progress bar, as datasets' and the Hub's libraries show
        pass
    return {"text": str(i), "pid": os.getpid(), "cpus": os.cpu_count()}


def shards_step(config, output_path):
    """A data step: one shard per core, each in a worker of its own (zephyr's default parallelism)."""
    for _ in tqdm.tqdm(range(2), disable=True):
        pass
    Dataset.from_items([[i] for i in range(config["shards"])]).map(_shard_record).write(JsonlSink(output_path))

'''


_RUN = """
import sys
import leaky_steps
from marin.execution.run.worker import RunningStep, running

if __name__ == "__main__":  # as a step's own process runs it: its shards' workers are spawned from here
    with running(RunningStep("data/shards", "v1", sys.argv[1], sys.argv[2])):
        leaky_steps.shards_step({"shards": int(sys.argv[3])}, sys.argv[1])
"""


def test_data_steps_at_a_tpu_hosts_parallelism_leave_no_semaphore_behind(tmp_path: Path) -> None:
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "sitecustomize.py").write_text(textwrap.dedent(_SITE))
    (tmp_path / "leaky_steps.py").write_text(textwrap.dedent(_STEPS))
    (tmp_path / "run_step.py").write_text(textwrap.dedent(_RUN))
    out = tmp_path / "out"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path / "site"), str(tmp_path)])}
    # The step's process is where the run's resource tracker starts (its first worker's spawn):
    # what the tracker says at the end is on this process's standard error.
    done = subprocess.run([sys.executable, str(tmp_path / "run_step.py"), str(out), str(tmp_path), str(HOST_CPUS)],
                          capture_output=True, text=True, cwd=workspace_root(), env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    records = [json.loads(line) for path in sorted(out.rglob("*.jsonl")) for line in path.read_text().splitlines()]
    # The step ran its shards at the host's parallelism: one worker each, every one seeing 13 cores.
    assert len(records) == HOST_CPUS and len({r["pid"] for r in records}) == HOST_CPUS
    assert {r["cpus"] for r in records} == {HOST_CPUS}
    assert "leaked semaphore" not in done.stderr, done.stderr[-3000:]
