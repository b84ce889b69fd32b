"""What a store that fails costs: a fresh build of a 100-step chain on gs://, and the no-op run after it,
with 0 %, 1 % and 5 % of the requests faulted, side by side.

The store is fake-gcs-server (it enforces the store's preconditions) behind
:class:`testsupport.faults.FaultProxy`, seeded, its faults spread over every kind (resets before and
after the body, 429 and 503 with and without ``Retry-After``, stalls longer than the request
timeout, cut answers, 503 after a write), with a fixed round trip added to every request (a cloud
VM's). The runner's request timeout is the soak's (``MARIN_STORE_TIMEOUT=2``: a stalled request
costs 2 s, not the default 20). Each row: wall time, requests the proxy saw, faults injected, the
runner's own retries (``marin run``'s ``store:`` line) and whether ``marin verify`` found every
output as its manifest says. Faults should cost retries and seconds, never correctness, never
minutes of hanging.

Sizes: ``BENCH_FAULTS_STEPS`` (default 100), ``BENCH_FAULTS_DELAY_MS`` (default 10).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

RATES = (0.0, 0.01, 0.05)
STORE_TIMEOUT_S = 2.0
ROOT = Path(__file__).resolve().parents[1]


def _marin(args: list[str], env: dict[str, str]) -> tuple[float, str]:
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "marin.cli.main", *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=1800)
    took = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(f"marin {' '.join(args[:1])} failed ({done.returncode}): {done.stderr[-2000:]}")
    return took, done.stdout


def _retried(stdout: str) -> str:
    found = re.search(r"^store: .*?, (none retried|\d+ retried \([^)]*\))", stdout, re.M)
    return found.group(1) if found else "-"


def _rows(rate: float, steps: int, delay_s: float, work: str, emulator_url: str, bucket: str) -> list[tuple]:
    from testsupport.faults import FaultProxy, spread_rate
    from testsupport.gcs import emulator_env

    experiment = Path(work, f"chain_{steps}.py")
    experiment.write_text(f"from benchmarks.chain_steps import chain\nsteps = chain({steps})\n")
    prefix = f"{bucket}/faults-{rate:g}"
    rows = []
    with FaultProxy(emulator_url, rates=spread_rate(rate), seed=0, stall_s=2 * STORE_TIMEOUT_S, retry_after_s=1,
                    delay_s=delay_s) as proxy:
        env = {**os.environ, **emulator_env(proxy.url), "MARIN_STORE_TIMEOUT": str(STORE_TIMEOUT_S),
               "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)}
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        for label, args in ((f"build of {steps} steps", ["run", str(experiment), "--prefix", prefix, "--no-fast"]),
                            ("no-op run after it", ["run", str(experiment), "--prefix", prefix, "--no-fast"])):
            before, faults_before = proxy.count(), sum(proxy.counts().values())
            took, out = _marin(args, env)
            rows.append((label, rate, took, proxy.count() - before, sum(proxy.counts().values()) - faults_before,
                         _retried(out)))
        # Checked straight at the emulator: the verdict itself is not faulted.
        direct = {**env, **emulator_env(emulator_url)}
        _, verified = _marin(["verify", str(experiment), "--prefix", prefix], direct)
        ok = f"verified {steps} steps" in verified and "no problems" in verified
    return [(*row, "clean" if ok else "PROBLEMS") for row in rows]


def main() -> None:
    from testsupport.gcs import start_fake_gcs_server

    steps = int(os.environ.get("BENCH_FAULTS_STEPS", "100"))
    delay_s = float(os.environ.get("BENCH_FAULTS_DELAY_MS", "10")) / 1e3
    print(f"\nA store that fails: a {steps}-step chain built on gs:// (fake-gcs-server, {delay_s * 1e3:.0f} ms a "
          f"request), then run again (no-op), with a share of the requests faulted (every kind; request timeout "
          f"{STORE_TIMEOUT_S:g} s)")
    print(f"{'':<22}{'faults':>7}{'wall s':>9}{'vs 0%':>7}{'requests':>10}{'faulted':>9}{'verify':>8}  runner's retries")
    emulator = start_fake_gcs_server()
    try:
        bucket = emulator.create_bucket()
        with tempfile.TemporaryDirectory(prefix="bench-faults-") as work:
            table = []
            for rate in RATES:
                table += _rows(rate, steps, delay_s, work, emulator.url, bucket)
            for label in sorted({row[0] for row in table}, key=lambda x: x.startswith("no-op")):
                base = next(row for row in table if row[0] == label and row[1] == 0.0)
                for row in (r for r in table if r[0] == label):
                    _label, rate, took, requests, faulted, retried, verify = row
                    print(f"{label:<22}{rate:>7.0%}{took:>9.1f}{took / base[2]:>6.2f}x{requests:>10}{faulted:>9}"
                          f"{verify:>8}  {retried}")
    finally:
        emulator.stop()


if __name__ == "__main__":
    main()
