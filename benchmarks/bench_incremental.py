"""Data steps rebuilt file by file: one file added to a 1,000-file source, rebuilt by each map-style
step beside the same step built from scratch over all 1,001 files (``python -m benchmarks incremental``).

For each step: seconds from scratch, seconds for the rebuild after the file was added, their ratio,
what the rebuild's provenance says it reused and processed, and whether its output is byte for
byte the from-scratch build's (it must be). Steps run in this process (no worker start-up), so
the times are the steps' own work.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

from fray.inprocess import InProcessClient
from marin.execution.core.lazy import lower
from marin.execution.run.runner import StepRunner
from marin.execution.store.step_record import StepRecord
from marin.experiment.data import tokenized
from marin.experiment.data.corpus import generate_story
from marin.experiment.data.tokenizer import train_bpe_tokenizer
from marin.experiment.datakit import dedup, heuristics, html_to_text
from marin.processing.attributes import write_jsonl
from rigging import filesystem as fs

FILES = 1000
DOCS_PER_FILE = 10


def _documents(folder: str, index: int) -> None:
    stories = [generate_story(7, index * DOCS_PER_FILE + j) for j in range(DOCS_PER_FILE)]
    write_jsonl(os.path.join(folder, f"part-{index:05d}.jsonl"),
                [{"id": f"{index}-{j}", "text": s} for j, s in enumerate(stories)])
    with open(os.path.join(folder, "..", "pages", f"page-{index:05d}.html"), "w") as f:
        f.write("<html><body><nav>Home | Stories</nav><article>"
                + "".join(f"<p>{s}</p>" for s in stories) + "</article></body></html>")


def _build(prefix: str, handle: Any) -> tuple[float, str]:
    runner = StepRunner(prefix=prefix, client=InProcessClient(), strict_env=False)
    started = time.perf_counter()
    result = runner.run([lower(handle)])
    seconds = time.perf_counter() - started
    assert result.ok, [(s.name, s.error) for s in result.steps]
    step = next(s for s in result.steps if s.name == handle.name)
    return seconds, step.output_path


def _contents(path: str) -> dict[str, bytes]:
    folder = StepRecord(path).files_folder()
    return {rel: fs.read_bytes(fs.join(folder, rel)) for rel, _ in fs.walk_files(folder)
            if not rel.startswith((".marin/", ".attempts/"))}


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="bench-incremental-") as work:
        docs, pages = os.path.join(work, "docs"), os.path.join(work, "pages")
        os.makedirs(docs)
        os.makedirs(pages)
        for i in range(FILES):
            _documents(docs, i)
        tokenizer = train_bpe_tokenizer(docs, os.path.join(work, "tok"), vocab_size=1000, max_documents=2000)
        steps: dict[str, Callable[[], Any]] = {
            "html_to_text": lambda: html_to_text("b/text", pages, extractor="resiliparse", min_chars=20),
            "heuristics": lambda: heuristics("b/rules", docs),
            "dedup (fuzzy)": lambda: dedup("b/fuzzy", docs, method="fuzzy"),
            "tokenized": lambda: tokenized("b/tokens", docs, tokenizer, validation_fraction=0.05),
        }
        prefix = os.path.join(work, "store")
        for make in steps.values():
            _build(prefix, make())
        _documents(docs, FILES)  # one more file, in each source
        print(f"\n== {FILES:,} files of {DOCS_PER_FILE} documents, then one file added: the rebuild beside a build "
              f"from scratch over all {FILES + 1:,} ==")
        print(f"{'step':16s}{'from scratch':>14s}{'rebuild':>10s}{'ratio':>8s}  {'reused / processed':20s}identical")
        for label, make in steps.items():
            rebuild, path = _build(prefix, make())
            scratch, fresh = _build(os.path.join(work, f"scratch-{label.split()[0]}"), make())
            prov = StepRecord(path).read_provenance()
            inc = (prov.incremental if prov is not None else None) or {}
            done = f"{inc.get('files_reused', 0)} / {inc.get('files_processed', 0)}"
            same = _contents(path) == _contents(fresh)
            print(f"{label:16s}{scratch:12.2f} s{rebuild:8.2f} s{scratch / rebuild:7.1f}x  {done:20s}{same}")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
