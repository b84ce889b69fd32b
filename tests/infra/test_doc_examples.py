"""Every Python example of the README and the guides runs as written: each ``python`` block is
executed from the repository root, and every step or handle it makes is lowered and hashed with its
whole graph (what ``marin plan`` does first; sources are taken to hold one fixed content, so no Hub
dataset is needed). The Hugging Face example reads an exported model: ``tests/test_export_nano.py``
runs it on one."""

from __future__ import annotations

import pytest

from marin.execution.core.placeholders import Placeholder
from testsupport.doc_examples import ROOT, DocExample, doc_examples
from testsupport.hashing import hash_over_fixed_sources

READS_EXPORTED_MODEL = '"nano-hf"'
"""What the Hugging Face example names: the folder ``marin export-hf`` wrote."""

EXAMPLES = doc_examples()


def test_the_guides_have_examples_and_one_of_them_reads_an_exported_model() -> None:
    assert len(EXAMPLES) >= 4
    assert [e.path for e in EXAMPLES if READS_EXPORTED_MODEL in e.code] == ["docs/huggingface.md"]


@pytest.mark.parametrize("example", [e for e in EXAMPLES if READS_EXPORTED_MODEL not in e.code],
                         ids=lambda e: e.id)
def test_every_python_example_runs_as_written(example: DocExample, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)
    monkeypatch.syspath_prepend(str(ROOT))
    namespace: dict[str, object] = {"__name__": "doc_example"}
    exec(compile(example.code, example.id, "exec"), namespace)  # noqa: S102 - the example is the test
    made = [v for v in namespace.values() if isinstance(v, Placeholder)]
    hashes = {hash_over_fixed_sources(v) for v in made}
    assert all(len(h) == 64 for h in hashes)
    if "steps" in namespace:
        steps = namespace["steps"]
        assert isinstance(steps, list) and steps and all(isinstance(s, Placeholder) for s in steps)
