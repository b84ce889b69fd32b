"""Steps on a Ray cluster (a real head on this machine): same hashes and outputs as local processes,
logs streamed back into each step's output, and a lost worker retried until the graph completes.

What is compared between the local and the Ray run of one graph:

* hello world: the output folders (names with hashes) and ``stats.json``, byte for byte;
* tokenize-and-train: the output folders, every file of the corpus, tokenizer and tokenized
  steps byte for byte (shards, index, tokenizer.json; not the hidden ``.commits`` records, which
  name absolute input paths), and the final parameters of the model
  (``final/params.npz``) to ``PARAMS_RTOL``/``PARAMS_ATOL``, the final training loss to
  ``LOSS_RTOL``. Both runs use CPU XLA on the same machine, so they come out equal in practice;
  the tolerances only allow for a different reduction order.
"""

from __future__ import annotations

import io
import json
import os
import signal
import sys
import time
from dataclasses import dataclass

import numpy as np
import pytest

from iris.cluster import ResourceConfig
from marin.execution.core.lazy import lower
from marin.execution.core.placeholders import output_path_of
from marin.execution.core.step import Step
from marin.execution.run.outcome import Outcome
from marin.execution.run.runner import StepRunner
from marin.execution.store.records import StepRecord
from rigging import filesystem as fs
from rigging.config.discovery import Backend

# Experiments import as ``experiments.*`` from the workspace root, here and in every worker.
_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

PARAMS_RTOL, PARAMS_ATOL = 1e-6, 1e-7
LOSS_RTOL = 1e-6


def _runner(prefix: str, backend: Backend, ray_address: str | None = None, **kwargs) -> StepRunner:
    return StepRunner(prefix=prefix, max_parallel=2, strict_env=False, backend=backend, ray_address=ray_address,
                      poll_interval=0.05, **kwargs)


def _run_locally_and_on_ray(graph, tmp_path, ray_address: str):
    """The same graph run into two fresh prefixes: with local processes, then on the Ray cluster."""
    local = _runner(str(tmp_path / "local"), Backend.LOCAL).run(graph)
    remote_runner = _runner(str(tmp_path / "ray"), Backend.RAY, ray_address)
    try:
        return local, remote_runner.run(graph)
    finally:
        remote_runner.close()


def _relative_outputs(result) -> dict[str, str]:
    return {s.name: os.path.relpath(s.output_path, result.prefix) for s in result.steps}


def _files(output_path: str) -> dict[str, bytes]:
    """Every file of a step's output by relative path, except hidden bookkeeping: the step's records
    (``.marin``) and zephyr's shard commits (``.commits``, which name the absolute input paths, so
    they differ between two prefixes)."""
    root = fs.strip_protocol(output_path)
    out = {}
    for folder, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if not d.startswith(".")]
        for name in files:
            path = os.path.join(folder, name)
            with open(path, "rb") as f:
                out[os.path.relpath(path, root)] = f.read()
    return out


# -- hello world ------------------------------------------------------------------------------

def test_hello_world_on_ray_matches_local(tmp_path, ray_cluster):
    from experiments.tutorials import hello_world

    graph = [lower(hello_world.stats)]
    local, remote = _run_locally_and_on_ray(graph, tmp_path, ray_cluster)
    assert local.ok and remote.ok, (local.failed, remote.failed)
    assert [s.outcome for s in remote.steps] == [Outcome.RAN, Outcome.RAN]
    assert _relative_outputs(local) == _relative_outputs(remote)
    stats = [fs.read_bytes(fs.join(r.by_name("hello/stats").output_path, "stats.json")) for r in (local, remote)]
    assert stats[0] == stats[1]
    assert json.loads(stats[1])["sum"] == sum(range(100))
    # The step's output printed on the Ray worker reached its log under the prefix.
    log = fs.read_text(StepRecord(remote.by_name("hello/stats").output_path).log)
    assert "stats: {'count': 100" in log
    provenance = json.loads(fs.read_text(StepRecord(remote.by_name("hello/stats").output_path).provenance))
    assert provenance["client"] == "RayClient" and provenance["attempts"] == 1


# -- tokenize and train -----------------------------------------------------------------------

def _train_graph():
    from experiments.llama import llama_nano
    from levanter.checkpoint import CheckpointConfig
    from levanter.optim import AdamConfig
    from marin.experiment.data import bundled_corpus, tokenized, trained_tokenizer
    from marin.experiment.training.train import train_lm

    corpus = bundled_corpus(name="raw/scaleout-corpus", num_stories=150, num_shards=2)
    tokenizer = trained_tokenizer(name="tokenizers/scaleout-bpe", source=corpus, vocab_size=300)
    data = tokenized(name="tokenized/scaleout", source=corpus, tokenizer=tokenizer, validation_fraction=0.1)
    model = train_lm(name="checkpoints/scaleout-nano", version="v1", model=llama_nano,
                     optimizer=AdamConfig(learning_rate=3e-3), datasets={data: 1.0}, batch_size=2, seq_len=32,
                     num_train_steps=4, eval_every=0, eval_batches=1, checkpoint=CheckpointConfig(save_every=2))
    return lower(model)


def _params(output_path: str) -> dict[str, np.ndarray]:
    with np.load(io.BytesIO(fs.read_bytes(fs.join(output_path, "final", "params.npz")))) as npz:
        return {k: npz[k] for k in npz.files}


def test_tokenize_and_train_on_ray_matches_local(tmp_path, ray_cluster):
    graph = [_train_graph()]
    local, remote = _run_locally_and_on_ray(graph, tmp_path, ray_cluster)
    assert local.ok and remote.ok, (local.failed, remote.failed)
    assert all(s.outcome is Outcome.RAN for s in remote.steps)
    assert _relative_outputs(local) == _relative_outputs(remote)
    for name in ("raw/scaleout-corpus", "tokenizers/scaleout-bpe", "tokenized/scaleout"):
        ours, theirs = _files(local.by_name(name).output_path), _files(remote.by_name(name).output_path)
        assert ours and ours.keys() == theirs.keys(), name
        assert all(ours[k] == theirs[k] for k in ours), f"{name}: files differ"
    assert any(k.startswith("train/") for k in _files(local.by_name("tokenized/scaleout").output_path))

    model = "checkpoints/scaleout-nano"
    ours, theirs = _params(local.by_name(model).output_path), _params(remote.by_name(model).output_path)
    assert ours.keys() == theirs.keys() and ours
    for k in ours:
        np.testing.assert_allclose(theirs[k], ours[k], rtol=PARAMS_RTOL, atol=PARAMS_ATOL, err_msg=k)
    losses = [json.loads(fs.read_text(fs.join(r.by_name(model).output_path, "train_summary.json")))["final_loss"]
              for r in (local, remote)]
    assert np.isfinite(losses[0])
    np.testing.assert_allclose(losses[1], losses[0], rtol=LOSS_RTOL)
    assert "trained 4 steps" in fs.read_text(StepRecord(remote.by_name(model).output_path).log)


# -- a lost worker is retried -----------------------------------------------------------------

@dataclass(frozen=True)
class FlakyConfig:
    """``victim``: what the first attempt kills: ``self`` (the step's process) or ``worker``
    (the process that runs it: a Ray worker). ``parts``: committed pieces of work."""

    victim: str
    parts: int = 3


def flaky_resumable(config: FlakyConfig, output_path: str) -> None:
    """Commit parts one by one; on the first attempt, die after committing part 1.

    A later attempt continues from the committed parts, as training resumes from its checkpoint.
    """
    root = fs.strip_protocol(output_path)
    attempts_file = os.path.join(root, "attempts.txt")
    attempt = (len(open(attempts_file).read().split()) if os.path.exists(attempts_file) else 0) + 1
    with open(attempts_file, "a") as f:
        f.write(f"{attempt}\n")
    done = sorted(int(n.split("-")[1]) for n in os.listdir(root) if n.startswith("part-"))
    print(f"attempt {attempt}: parts already committed: {done}", flush=True)
    for i in range(len(done), config.parts):
        fs.atomic_write(fs.join(output_path, f"part-{i}"), f"{i}\n")
        if attempt == 1 and i == 1:
            print("dying now", flush=True)
            if config.victim == "worker":
                # A Ray worker forwards its job's output every 0.2 s, and what it has not forwarded
                # dies with it: the step dies mid-run once its output so far has streamed back. (A
                # local step's output is in its log file as it prints it.)
                time.sleep(1.0)
            os.kill(os.getpid() if config.victim == "self" else os.getppid(), signal.SIGKILL)
            time.sleep(60)
    fs.atomic_write(fs.join(output_path, "resumed_from.txt"), str(len(done)))


def count_parts(config: dict, output_path: str) -> None:
    """Write how many parts the source step committed."""
    parts = [n for n in fs.listdir(config["source"]) if n.startswith("part-")]
    fs.atomic_write(fs.join(output_path, "count.txt"), str(len(parts)))


@pytest.mark.parametrize("backend", [Backend.LOCAL, Backend.RAY])
def test_a_lost_worker_is_retried_and_resumes(tmp_path, backend, request):
    address = request.getfixturevalue("ray_cluster") if backend is Backend.RAY else None
    victim = "worker" if backend is Backend.RAY else "self"
    step = Step(name="flaky/resumable", fn=flaky_resumable, config=FlakyConfig(victim=victim),
                resources=ResourceConfig(cpus=1, max_retries=1))
    after = Step(name="flaky/after", fn=count_parts, config={"source": output_path_of(step)})
    runner = _runner(str(tmp_path / "store"), backend, address)
    try:
        result = runner.run([after])
    finally:
        runner.close()
    assert result.ok, result.failed
    assert fs.read_text(fs.join(result.by_name("flaky/after").output_path, "count.txt")) == "3"
    out = result.by_name("flaky/resumable").output_path
    assert fs.read_text(fs.join(out, "attempts.txt")).split() == ["1", "2"]
    assert fs.read_text(fs.join(out, "resumed_from.txt")) == "2"  # parts 0 and 1 were kept
    record = StepRecord(out)
    provenance = json.loads(fs.read_text(record.provenance))
    assert provenance["attempts"] == 2 and provenance["retries"] == 1
    log = fs.read_text(record.log)
    assert "attempt 1: parts already committed: []" in log and "dying now" in log
    assert "[marin] attempt 1 of flaky/resumable lost its process" in log
    assert "attempt 2: parts already committed: [0, 1]" in log


@pytest.mark.parametrize("backend", [Backend.LOCAL, Backend.RAY])
def test_without_retries_a_lost_worker_fails_the_step(tmp_path, backend, request):
    address = request.getfixturevalue("ray_cluster") if backend is Backend.RAY else None
    victim = "worker" if backend is Backend.RAY else "self"
    step = Step(name="flaky/no-retries", fn=flaky_resumable, config=FlakyConfig(victim=victim))
    runner = _runner(str(tmp_path / "store"), backend, address)
    try:
        result = runner.run([step])
    finally:
        runner.close()
    [outcome] = result.steps
    assert outcome.outcome is Outcome.FAILED
    assert "process was lost on attempt 1" in outcome.error
    assert fs.read_text(fs.join(outcome.output_path, "attempts.txt")).split() == ["1"]


def raise_once_per_call(config: dict, output_path: str) -> None:
    """Count the call, then raise (a bug in the step, not a lost worker)."""
    with open(os.path.join(config["counter"], "calls"), "a") as f:
        f.write("x")
    raise ValueError("a bug, not a lost host")


def test_an_exception_is_not_retried(tmp_path):
    counter = tmp_path / "counter"
    counter.mkdir()
    step = Step(name="flaky/raises", fn=raise_once_per_call, config={"counter": str(counter)},
                resources=ResourceConfig(max_retries=3))
    result = _runner(str(tmp_path / "store"), Backend.LOCAL).run([step])
    assert result.steps[0].outcome is Outcome.FAILED and "a bug, not a lost host" in result.steps[0].error
    assert (counter / "calls").read_text() == "x"


def preempted_once(config: dict, output_path: str) -> None:
    """Raise levanter's ``TrainingPreempted`` on the first call, as training does after SIGTERM."""
    from levanter.trainer import TrainingPreempted

    marker = os.path.join(config["counter"], "preempted")
    if not os.path.exists(marker):
        open(marker, "w").close()
        raise TrainingPreempted(7, output_path)
    fs.atomic_write(fs.join(output_path, "done.txt"), "ok")


def test_a_preempted_step_exits_75_and_is_retried(tmp_path):
    counter = tmp_path / "counter"
    counter.mkdir()
    step = Step(name="flaky/preempted", fn=preempted_once, config={"counter": str(counter)},
                resources=ResourceConfig(max_retries=1))
    result = _runner(str(tmp_path / "store"), Backend.LOCAL).run([step])
    assert result.ok, result.failed
    log = fs.read_text(StepRecord(result.steps[0].output_path).log)
    assert "exit code 75" in log and "preempted by SIGTERM after step 7" in log


# -- progress of a step on a Ray worker -------------------------------------------------------

def count_slowly(config: dict, output_path: str) -> None:
    """Work through ``config["units"]`` units, writing a progress record beside the output as it goes."""
    from rigging.progress import ProgressWriter

    writer = ProgressWriter(output_path, total=config["units"], unit="step", interval=0.0)
    for i in range(config["units"]):
        time.sleep(0.08)
        writer.update(i + 1, loss=1.0 / (i + 1))
    fs.atomic_write(fs.join(output_path, "done.txt"), "ok")


def test_progress_of_a_step_on_a_ray_worker_shows_while_it_runs(tmp_path, ray_cluster):
    import re

    from marin.cli.display import PlainReporter

    out = io.StringIO()
    step = Step(name="ray/progress", fn=count_slowly, config={"units": 20})
    runner = _runner(str(tmp_path / "store"), Backend.RAY, ray_cluster, reporter=PlainReporter(out, progress_interval=0.1))
    try:
        result = runner.run([step])
    finally:
        runner.close()
    assert result.ok, result.failed
    lines = out.getvalue().splitlines()
    end = next(i for i, line in enumerate(lines) if line.startswith("[ran] ray/progress"))
    counts = [int(m.group(1)) for line in lines[:end]
              for m in [re.match(r"\[progress\] ray/progress: step (\d+)/20 \(\d+%\), loss", line)] if m]
    assert counts and min(counts) < 20, out.getvalue()
