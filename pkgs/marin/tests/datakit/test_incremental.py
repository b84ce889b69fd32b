"""Data steps rebuilt file by file: a build over a changed file set copies the parts of unchanged
files from an earlier build, processes only the others, and is byte-identical to a build from
scratch (local and gs://); what it reused is in its provenance, never in its output."""

from __future__ import annotations

from pathlib import Path

import pytest

from fray.inprocess import InProcessClient
from marin.execution.core.lazy import lower
from marin.execution.core.traits import Start
from marin.execution.run.runner import StepRunner
from marin.execution.run.worker import RunningStep, running
from marin.execution.store.step_record import StepRecord
from marin.experiment.datakit import heuristics, html_to_text
from marin.processing import html as html_module
from marin.processing.attributes import list_shards, read_documents, read_records, read_summary, write_jsonl
from marin.processing.per_file import (
    PARTS_FILE,
    PartOutput,
    content_fingerprint,
    input_files,
    map_files,
    read_parts,
)
from rigging import filesystem as fs

N = 30
_RIVERS = ("Danube", "Rhine", "Loire", "Elbe", "Oder", "Tagus")


def _page(i: int, edit: str = "") -> str:
    river = _RIVERS[i % len(_RIVERS)]
    return (f"<html><body><nav>Home | About</nav><article><h1>Notes on the {river}, part {i}{edit}</h1>"
            f"<p>The {river} carries barges past town {i}, and the boatmen say the current is strong. "
            f"It floods every spring and the fields along it are rich.{edit}</p></article></body></html>")


def _write_pages(folder: str, indices, edit: str = "") -> None:
    for i in indices:
        fs.atomic_write(fs.join(folder, f"p{i:03d}.html"), _page(i, edit))


def _text(folder: str, name: str = "text/pages"):
    return html_to_text(name, folder, extractor="resiliparse", min_chars=20)


def _runner(prefix: str) -> StepRunner:
    return StepRunner(prefix=prefix, client=InProcessClient(), poll_interval=0.01, strict_env=False)


def _build(prefix: str, *handles) -> dict[str, str]:
    """Build ``handles``; the files folder of each step built, by name."""
    result = _runner(prefix).run([lower(h) for h in handles])
    assert result.ok, [(s.name, s.error) for s in result.steps]
    return {s.name: StepRecord(s.output_path).files_folder() for s in result.steps}


def _incremental(folder: str) -> dict | None:
    provenance = StepRecord(folder.split("/.attempts/")[0]).read_provenance()
    assert provenance is not None
    return provenance.incremental


def _contents(folder: str) -> dict[str, bytes]:
    return {rel: fs.read_bytes(fs.join(folder, rel)) for rel, _size in fs.walk_files(folder)
            if not rel.startswith((".marin/", ".attempts/"))}


def _digest(folder: str) -> str | None:
    success = StepRecord(folder.split("/.attempts/")[0]).read_success()
    assert success is not None
    return success.output_digest


def _same_as_scratch(folder: str, built: str, scratch_prefix: str, name: str = "text/pages") -> None:
    scratch = _build(scratch_prefix, _text(folder, name))[name]
    assert _contents(built) == _contents(scratch)
    assert _digest(built) == _digest(scratch)


def test_adding_one_file_processes_one_file_and_matches_a_build_from_scratch(tmp_path: Path) -> None:
    pages, prefix = str(tmp_path / "pages"), str(tmp_path / "store")
    _write_pages(pages, range(N))
    first = _build(prefix, _text(pages))["text/pages"]
    assert _incremental(first) is None  # nothing earlier: built from scratch
    assert sorted(s.name for s in list_shards(first)) == [f"p{i:03d}.jsonl.gz" for i in range(N)]

    _write_pages(pages, [N])
    plan = _runner(prefix).plan([lower(_text(pages))])
    planned = next(p for p in plan.steps if p.name == "text/pages")
    assert planned.start is not None and planned.start.reuse_parts == first
    assert planned.start.note.startswith("reuses the per-file outputs of text/pages-")
    assert any("1 file added" in r.detail for r in planned.reasons)
    second = _build(prefix, _text(pages))["text/pages"]
    assert _incremental(second) == {"files_reused": N, "files_processed": 1}
    assert read_summary(second)["pages"] == read_summary(second)["documents"] == N + 1
    _same_as_scratch(pages, second, str(tmp_path / "scratch-1"))

    # A changed file is processed again; a removed file's output is gone.
    _write_pages(pages, [3], edit=" (revised)")
    fs.delete(fs.join(pages, "p007.html"))
    third = _build(prefix, _text(pages))["text/pages"]
    assert _incremental(third) == {"files_reused": N - 1, "files_processed": 1}
    assert not fs.exists(fs.join(third, "p007.jsonl.gz"))
    assert "(revised)" in next(read_documents(fs.join(third, "p003.jsonl.gz")))["text"]
    assert [p.name for p in read_parts(third) or []] == [f"p{i:03d}.html" for i in range(N + 1) if i != 7]
    _same_as_scratch(pages, third, str(tmp_path / "scratch-2"))


def test_a_failed_incremental_build_then_a_rerun_gives_the_same_bytes(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    pages, prefix = str(tmp_path / "pages"), str(tmp_path / "store")
    _write_pages(pages, range(6))
    _build(prefix, _text(pages))
    _write_pages(pages, [6, 7])
    real = html_module.extract_text

    def flaky(html: str, config, url=None) -> str:
        if "part 7" in html:
            raise OSError("the worker's disk went away")
        return real(html, config, url)

    monkeypatch.setattr(html_module, "extract_text", flaky)
    assert not _runner(prefix).run([lower(_text(pages))]).ok
    monkeypatch.setattr(html_module, "extract_text", real)
    again = _build(prefix, _text(pages))["text/pages"]
    assert _incremental(again) == {"files_reused": 6, "files_processed": 2}
    _same_as_scratch(pages, again, str(tmp_path / "scratch"))


def test_only_a_change_of_the_files_reuses_parts(tmp_path: Path) -> None:
    pages, prefix = str(tmp_path / "pages"), str(tmp_path / "store")
    _write_pages(pages, range(3))
    _build(prefix, _text(pages))
    _write_pages(pages, [3])
    forced = StepRunner(prefix=prefix, client=InProcessClient(), strict_env=False, force=["text/pages"])
    assert next(p for p in forced.plan([lower(_text(pages))]).steps if p.name == "text/pages").start is None
    # Another recipe (min_chars) is another output: nothing of the earlier build is reused.
    other = html_to_text("text/pages", pages, extractor="resiliparse", min_chars=21)
    planned = next(p for p in _runner(prefix).plan([lower(other)]).steps if p.name == "text/pages")
    assert planned.start is None
    # Blocks cut by position (num_shards) are not made file by file.
    blocks = html_to_text("text/blocks", pages, extractor="resiliparse", min_chars=20, num_shards=2)
    assert not lower(blocks).config.per_file
    _build(prefix, blocks)
    _write_pages(pages, [4])
    planned = next(p for p in _runner(prefix).plan([lower(blocks)]).steps if p.name == "text/blocks")
    assert planned.start is None


def test_downstream_attribute_steps_follow_file_by_file(tmp_path: Path) -> None:
    """heuristics over html_to_text: the parts html_to_text copied have the same content, so
    heuristics reuses their sidecars too."""
    pages, prefix = str(tmp_path / "pages"), str(tmp_path / "store")
    _write_pages(pages, range(5))
    text = _text(pages)
    _build(prefix, heuristics("quality/rules", text))
    _write_pages(pages, [5])
    text = _text(pages)
    built = _build(prefix, heuristics("quality/rules", text))
    assert _incremental(built["text/pages"]) == {"files_reused": 5, "files_processed": 1}
    assert _incremental(built["quality/rules"]) == {"files_reused": 5, "files_processed": 1}
    scratch = _build(str(tmp_path / "scratch"), heuristics("quality/rules", _text(pages)))
    assert _contents(built["quality/rules"]) == _contents(scratch["quality/rules"])
    assert read_summary(built["quality/rules"])["documents"] == 6


def test_on_gcs(gcs_bucket: str) -> None:
    pages, prefix = f"{gcs_bucket}/raw/pages", f"{gcs_bucket}/store"
    _write_pages(pages, range(4))
    first = _build(prefix, _text(pages))["text/pages"]
    _write_pages(pages, [4])
    second = _build(prefix, _text(pages))["text/pages"]
    assert second != first and second.startswith("gs://")
    assert _incremental(second) == {"files_reused": 4, "files_processed": 1}
    _same_as_scratch(pages, second, f"{gcs_bucket}/scratch")


def test_map_files_processes_a_part_whose_earlier_output_is_gone(tmp_path: Path) -> None:
    source = tmp_path / "docs"
    for k in range(3):
        write_jsonl(str(source / f"s{k}.jsonl"), [{"id": k, "text": f"doc {k}"}])
    files = input_files(str(source), (".jsonl",))
    assert [f.name for f in files] == ["s0.jsonl", "s1.jsonl", "s2.jsonl"]
    seen: list[str] = []

    def one(out: str):
        def process(f) -> PartOutput:
            seen.append(f.name)
            fs.atomic_write(fs.join(out, f.name + ".len"), str(fs.size(f.path)))
            return PartOutput((f.name + ".len",), {"n": 1})
        return process

    earlier = str(tmp_path / "earlier")
    map_files(files, earlier, one(earlier))
    fs.delete(fs.join(earlier, "s1.jsonl.len"))
    later = str(tmp_path / "later")
    seen.clear()
    step = RunningStep("x", "v1", later, str(tmp_path), start=Start("reuses", reuse_parts=earlier))
    with running(step):
        parts = map_files(files, later, one(later))
    assert seen == ["s1.jsonl"] and [p.reused for p in parts] == [True, False, True]
    assert step.reports() == {"incremental": {"files_reused": 2, "files_processed": 1}}
    assert fs.read_bytes(fs.join(later, PARTS_FILE)) == fs.read_bytes(fs.join(earlier, PARTS_FILE))
    with pytest.raises(ValueError, match="plain path inside the output folder"):
        PartOutput(("../escape",))


def test_an_objects_generation_is_not_its_content() -> None:
    assert content_fingerprint("md5:XUFAKrxLKna5cZ2REBfFkg==:gen1796214379688612992") == "md5:XUFAKrxLKna5cZ2REBfFkg=="
    assert content_fingerprint("crc32c:mnG7TA==:gen17") == "crc32c:mnG7TA==:gen17"
    assert content_fingerprint("ab" * 32) == "ab" * 32
    with pytest.raises(ValueError, match="reuse_parts exclude each other"):
        Start("x", extends="/a", step=1, reuse_parts="/b")


def test_a_source_read_whole_must_be_the_same(tmp_path: Path) -> None:
    """classify's model file is not read file by file: another model reuses nothing."""
    from marin.execution.core.encoding import flatten_config
    from marin.execution.core.identity import fn_identity
    from marin.execution.core.sources import source
    from marin.execution.core.step import Step
    from marin.execution.store.code_digest import code_digest
    from marin.execution.store.provenance_record import Provenance
    from marin.execution.store.sources import fingerprint_source
    from marin.processing.incremental import IncrementalStart
    from marin.processing.quality.classifier import ClassifyConfig, classify_step

    write_jsonl(str(tmp_path / "docs" / "a.jsonl"), [{"id": 1, "text": "x"}])
    model = tmp_path / "model.bin"
    model.write_bytes(b"one")
    config = ClassifyConfig(input=source(str(tmp_path / "docs")), model=source(str(model)))
    step = Step("quality/scores", classify_step, config)
    earlier = tmp_path / "store" / "quality" / "scores-0123456789abcdef"
    fs.atomic_write(str(earlier / PARTS_FILE), '{"format": 1, "parts": []}')
    prov = Provenance(name=step.name, hash="0123456789abcdef", version="v1", fn=fn_identity(classify_step),
                      config_flat=flatten_config(config, {}), code=code_digest(classify_step).to_json(),
                      sources=[fingerprint_source(s.spec).to_json() for s in (config.input, config.model)])
    plan = IncrementalStart(("input",))
    start = plan(step, {id(step): "fedcba9876543210"}, lambda name: [(str(earlier), prov)])
    assert start is not None and start.reuse_parts == str(earlier)
    assert start.note == "reuses the per-file outputs of quality/scores-0123456789abcdef for unchanged files"
    model.write_bytes(b"two")
    assert plan(step, {id(step): "fedcba9876543210"}, lambda name: [(str(earlier), prov)]) is None


_ITEM = "the barge captain counted eleven lanterns on the stone bridge before the fog came down over the harbour"


def test_decontaminate_over_a_growing_folder_and_a_changed_eval_set(tmp_path: Path) -> None:
    from marin.experiment.datakit import decontaminate

    docs, evals, prefix = tmp_path / "docs", tmp_path / "eval", str(tmp_path / "store")
    write_jsonl(str(evals / "items.jsonl"), [{"id": "i1", "text": _ITEM}])
    filler = "people went about their usual business in the quiet village all afternoon long"

    def shard(k: int) -> None:
        write_jsonl(str(docs / f"s{k}.jsonl"), [{"id": f"{k}-a", "source": f"site{k % 2}", "text": f"{filler}. {_ITEM}."},
                                                {"id": f"{k}-b", "text": filler}])

    def step():
        return decontaminate("dc/web", str(docs), against={"quiz": str(evals)})

    for k in range(4):
        shard(k)
    _build(prefix, step())
    shard(4)
    built = _build(prefix, step())["dc/web"]
    assert _incremental(built) == {"files_reused": 4, "files_processed": 1}
    scratch = _build(str(tmp_path / "scratch"), step())["dc/web"]
    assert _contents(built) == _contents(scratch)
    assert read_summary(built)["matrix"] == {"site0": {"quiz": 3}, "site1": {"quiz": 2}}
    # Another eval set (the same path, other items) is another recipe: every shard is checked again.
    write_jsonl(str(evals / "items.jsonl"), [{"id": "i2", "text": _ITEM.replace("eleven", "twelve")}])
    assert _incremental(_build(prefix, step())["dc/web"]) is None


def _river_docs(docs: str, tmp_path: Path):
    """``doc_file(k, edit)`` writes a file of documents into ``docs``; ``step()`` tokenizes the folder."""
    from marin.experiment.data import tokenized
    from testsupport.levanter_data import byte_level_tokenizer

    def doc_file(k: int, edit: str = "") -> None:
        write_jsonl(fs.join(docs, f"d{k}.jsonl"), [{"id": f"{k}-{j}", "text": f"{_RIVERS[(k + j) % 6]} story {k}.{j}{edit}: "
                                                    f"the boat went down the river past {j + k} mills."} for j in range(12)])

    tokenizer = tmp_path / "tokenizer.json"
    tokenizer.write_text(byte_level_tokenizer([f"the boat went down the {r} past mills" for r in _RIVERS], 300))
    return doc_file, lambda: tokenized("tok/rivers", docs, str(tokenizer), validation_fraction=0.25)


def test_tokenized_on_gcs(gcs_bucket: str, tmp_path: Path) -> None:
    docs, prefix = f"{gcs_bucket}/raw/docs", f"{gcs_bucket}/store"
    doc_file, step = _river_docs(docs, tmp_path)
    for k in (0, 2, 4):
        doc_file(k)
    _build(prefix, step())
    doc_file(1)
    second = _build(prefix, step())["tok/rivers"]
    assert second.startswith("gs://") and _incremental(second) == {"files_reused": 3, "files_processed": 1}
    scratch = _build(f"{gcs_bucket}/scratch", step())["tok/rivers"]
    assert _contents(second) == _contents(scratch)


def test_tokenized_reuses_the_shards_of_unchanged_files_under_their_new_positions(tmp_path: Path) -> None:
    """One shard per file: a file added between two others moves the later shards up one place;
    their shards are copied there, not tokenized again, and the whole output (shards, commit
    records, index) is byte for byte a build from scratch."""
    docs, prefix = tmp_path / "docs", str(tmp_path / "store")
    doc_file, step = _river_docs(str(docs), tmp_path)

    for k in (0, 2, 4, 6):
        doc_file(k)
    first = _build(prefix, step())["tok/rivers"]
    assert [(p.name, p.stats) for p in read_parts(first) or []] == [(f"d{k}.jsonl", {"shard": i})
                                                                     for i, k in enumerate((0, 2, 4, 6))]
    doc_file(3)
    second = _build(prefix, step())["tok/rivers"]
    assert _incremental(second) == {"files_reused": 4, "files_processed": 1}
    assert [(p.name, p.stats["shard"]) for p in read_parts(second) or []] == [
        ("d0.jsonl", 0), ("d2.jsonl", 1), ("d3.jsonl", 2), ("d4.jsonl", 3), ("d6.jsonl", 4)]
    scratch = _build(str(tmp_path / "scratch-1"), step())["tok/rivers"]
    assert _contents(second) == _contents(scratch)
    assert _digest(second) == _digest(scratch)

    # A changed file is tokenized again, a removed one leaves no shard behind.
    doc_file(2, edit=" (revised)")
    fs.delete(str(docs / "d4.jsonl"))
    third = _build(prefix, step())["tok/rivers"]
    assert _incremental(third) == {"files_reused": 3, "files_processed": 1}
    scratch = _build(str(tmp_path / "scratch-2"), step())["tok/rivers"]
    assert _contents(third) == _contents(scratch)
    assert sorted(rel for rel in _contents(third) if rel.startswith("train/")) == [
        f"train/part-{i:05d}.array_record" for i in range(4)]


def test_fuzzy_dedup_signs_only_new_files_and_clusters_every_document_again(tmp_path: Path) -> None:
    """The signature phase is file by file; the clustering is global: a near-duplicate added in a
    new file joins the cluster of a document whose band keys were copied from the earlier build."""
    from marin.experiment.datakit import dedup

    docs, prefix = tmp_path / "docs", str(tmp_path / "store")

    def story(k: int, edit: str = "") -> str:
        river = _RIVERS[k % 6]
        return (f"on the banks of the {river} the ferryman {k} rowed travellers across every morning, "
                f"and in the evening he mended his nets and told stories about the old mill{edit}")

    for k in range(5):
        write_jsonl(str(docs / f"s{k}.jsonl"), [{"id": f"{k}-{j}", "text": story(10 * k + j)} for j in range(3)])

    def step():
        return dedup("dedup/stories", str(docs), threshold=0.7)

    first = _build(prefix, step())["dedup/stories"]
    assert read_summary(first)["duplicates"] == 0
    write_jsonl(str(docs / "s5.jsonl"), [{"id": "copy", "text": story(21, edit=" by the river")}])
    second = _build(prefix, step())["dedup/stories"]
    assert _incremental(second) == {"files_reused": 5, "files_processed": 1}
    copy = next(read_records(fs.join(second, "s5.jsonl")))
    assert copy["attributes"]["duplicate"] and copy["attributes"]["representative"] == "2-1", copy
    scratch = _build(str(tmp_path / "scratch"), step())["dedup/stories"]
    assert _contents(second) == _contents(scratch)
    assert _digest(second) == _digest(scratch)
