"""Report pages of big graphs: size of the page and time to draw it in headless Chromium.

The graph is ``n`` steps in groups of 100 (``benchmarks.chain_steps.sweeps``), planned against an
empty store (every step would run), for n = 1,000 and 10,000. Time to draw is what the page itself
measures: ``performance.now()`` when its script has drawn everything (``data-ready-ms``).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time

SIZES = (1000, 10000)


def _page(work: str, n: int) -> tuple[str, float]:
    from benchmarks.chain_steps import sweeps
    from marin.execution.plan.make import make_plan
    from marin.execution.store.store import StepStore
    from marin.report import collect_plan, write_report

    start = time.perf_counter()
    data = collect_plan(make_plan(sweeps(n), StepStore(os.path.join(work, f"store{n}")), explain=False))
    path = write_report(data, os.path.join(work, f"report{n}.html"))
    return path, time.perf_counter() - start


def _draw_ms(driver, path: str) -> float:
    from pathlib import Path

    driver.get(Path(path).resolve().as_uri())
    deadline = time.time() + 300
    while driver.execute_script("return document.body && document.body.getAttribute('data-ready')") != "true":
        if time.time() > deadline:
            raise RuntimeError(f"{path} never finished drawing")
        time.sleep(0.05)
    return float(driver.execute_script("return Number(document.body.getAttribute('data-ready-ms')) || performance.now()"))


def main() -> None:
    from marin.report.browser import headless_chromium

    work = tempfile.mkdtemp(prefix="marin-bench-report-")
    rows = []
    try:
        with headless_chromium(os.path.join(work, "profile")) as driver:
            for n in SIZES:
                path, build_s = _page(work, n)
                size = os.path.getsize(path)
                draw = min(_draw_ms(driver, path) for _ in range(3))
                rows.append((n, size, build_s, draw))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print("\n== report: page size and time to draw in headless Chromium (groups of 100 steps) ==")
    print(f"{'steps':>7}  {'page':>10}  {'bytes/step':>10}  {'collect+render':>14}  {'draw (best of 3)':>16}")
    for n, size, build_s, draw in rows:
        print(f"{n:>7,}  {size / 1e6:>8.2f} MB  {size / n:>10.0f}  {build_s * 1e3:>11.0f} ms  {draw:>13.0f} ms")


if __name__ == "__main__":
    main()
