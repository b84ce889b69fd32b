"""Run every benchmark report in one go: ``python -m benchmarks [name...]``."""

from __future__ import annotations

import importlib
import sys

BENCHES = ("bench_engine", "bench_scale", "bench_report", "bench_tokenize", "bench_train", "bench_cutoff",
           "bench_sharding", "bench_extend", "bench_shuffle", "bench_datakit", "bench_eval_harness", "bench_warm",
           "bench_lost_lease", "bench_sources", "bench_plan_sources", "bench_incremental", "bench_rules",
           "bench_html", "bench_warc", "bench_moments", "bench_accumulation", "bench_faults", "bench_noop_cpu",
           "bench_generate", "bench_serve")


def main(argv: list[str]) -> None:
    chosen = argv or list(BENCHES)
    for name in chosen:
        module = importlib.import_module(f"benchmarks.{name if name.startswith('bench_') else 'bench_' + name}")
        module.main()


if __name__ == "__main__":
    main(sys.argv[1:])
