"""Inputs the hash can see: a step that reads files, a gs:// prefix or a Hub dataset through
``source(...)`` gets a new identity when what it reads changes (not when a file is only
touched), the plan says what changed, a source that matches nothing is refused before any step
runs, and provenance records what was read."""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import steps_for_tests as t

from marin.execution.core.sources import Source, source
from marin.execution.core.step import Step
from marin.execution.plan.model import Action, ReasonKind, SourceNotFound
from marin.execution.run.runner import StepRunner
from marin.execution.store.records import StepRecord
from marin.experiment import tokenized
from rigging import filesystem as fs
from testsupport.hub_cache import jsonl_bytes, write_hub_dataset


@dataclass(frozen=True)
class ConcatConfig:
    """Read every file a source names; write their lines, in name order."""

    data: Any
    label: str = "concat"


def concat(config: ConcatConfig, output_path: str) -> None:
    spec = config.data
    assert isinstance(spec, str), f"fn receives the source as its path, got {spec!r}"
    if any(c in spec for c in "*?["):
        files = sorted(fs.glob(spec))
    elif os.path.isdir(spec):
        files = sorted(os.path.join(spec, n) for n in os.listdir(spec))
    else:
        files = [spec]
    lines = [fs.read_text(f) for f in files]
    fs.atomic_write(fs.join(output_path, "all.txt"), "".join(lines))


@dataclass(frozen=True)
class UseConfig:
    upstream: Any


def use(config: UseConfig, output_path: str) -> None:
    fs.atomic_write(fs.join(output_path, "copy.txt"), fs.read_text(fs.join(config.upstream, "all.txt")))


def _runner(prefix: str, **kwargs: Any) -> StepRunner:
    return StepRunner(prefix=prefix, max_parallel=2, client=t.InProcessClient(), poll_interval=0.01, **kwargs)


def _corpus(folder: Path, n: int = 3) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(1, n + 1):
        (folder / f"d{i}.jsonl").write_text(json.dumps({"text": f"document {i}"}) + "\n")
    return folder


def _graph(spec: str) -> tuple[Step, Step]:
    read = Step("data/concat", concat, ConcatConfig(source(spec)))
    return read, Step("data/use", use, UseConfig(read))


def _plan_of(prefix: str, steps: list[Step]) -> dict[str, Any]:
    return {p.name: p for p in _runner(prefix).plan(steps).steps}


@pytest.fixture
def stat_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    path = str(tmp_path / "stat-cache.sqlite")
    monkeypatch.setenv("MARIN_STAT_CACHE", path)
    return path


def test_a_changed_added_or_removed_file_gives_a_new_identity_and_the_plan_names_it(tmp_path, stat_cache, monkeypatch):
    monkeypatch.chdir(tmp_path)
    src = _corpus(tmp_path / "src")
    prefix = str(tmp_path / "store")
    spec = "src/*.jsonl"  # relative: made absolute when marked (workers run elsewhere)
    assert source(spec).spec == str(src / "*.jsonl")
    read, out = _graph(spec)
    assert _runner(prefix).run([out]).ok
    first = read.hash
    assert {p.action for p in _plan_of(prefix, list(_graph(spec)[1:])).values()} == {Action.CACHED}

    # Touched only: the same identity, nothing to run.
    later = time.time() + 5
    os.utime(src / "d1.jsonl", (later, later))
    read2, out2 = _graph(spec)
    assert read2.hash == first
    assert {p.action for p in _plan_of(prefix, [out2]).values()} == {Action.CACHED}

    # One line appended and a file added: a new identity, and the plan says which files.
    with open(src / "d1.jsonl", "a") as f:
        f.write(json.dumps({"text": "one more line"}) + "\n")
    (src / "d4.jsonl").write_text(json.dumps({"text": "document 4"}) + "\n")
    read3, out3 = _graph(spec)
    assert read3.hash != first
    plan = _plan_of(prefix, [out3])
    assert plan["data/concat"].action is Action.RUN
    [reason] = plan["data/concat"].reasons
    assert reason.kind is ReasonKind.SOURCE_CHANGED
    assert str(reason) == "source changed: src/*.jsonl: 1 file added (src/d4.jsonl), 1 changed (src/d1.jsonl)"
    assert plan["data/use"].action is Action.RUN
    result = _runner(prefix).run([out3])
    assert result.ok
    assert fs.read_text(fs.join(StepRecord(plan["data/use"].output_path).files_folder(), "copy.txt")).count("\n") == 5

    # A file removed: another identity, named.
    (src / "d2.jsonl").unlink()
    plan = _plan_of(prefix, [_graph(spec)[1]])
    assert [str(r) for r in plan["data/concat"].reasons] == ["source changed: src/*.jsonl: 1 file removed (src/d2.jsonl)"]


def test_provenance_records_what_each_source_held(tmp_path, stat_cache):
    src = _corpus(tmp_path / "src", n=2)
    prefix = str(tmp_path / "store")
    read, out = _graph(str(src))
    assert _runner(prefix).run([out]).ok
    prov = StepRecord(_plan_of(prefix, [out])["data/concat"].output_path).read_provenance()
    assert prov is not None
    [recorded] = prov.source_fingerprints()
    assert recorded.spec == str(src) and recorded.kind == "local"
    assert [name for name, _ in recorded.files] == ["d1.jsonl", "d2.jsonl"]
    assert prov.config["data"] == str(src)
    # The step that reads no source records none.
    use_prov = StepRecord(_plan_of(prefix, [out])["data/use"].output_path).read_provenance()
    assert use_prov is not None and use_prov.sources is None


def test_a_source_that_matches_nothing_is_refused_before_any_step_runs(tmp_path, stat_cache, counter):
    prefix = str(tmp_path / "store")
    first = t.node("first", counter)
    reader = Step("data/missing", concat, ConcatConfig(source(str(tmp_path / "nowhere" / "*.jsonl")), label="x"))
    with pytest.raises(SourceNotFound) as info:
        _runner(prefix).run([first, reader])
    message = str(info.value)
    assert "data/missing" in message and "nowhere" in message and "\n" not in message
    assert t.calls(counter)["first"] == 0
    with pytest.raises(SourceNotFound):
        _runner(prefix).plan([reader])


def test_an_object_rewritten_on_gcs_is_cached_and_one_changed_gives_a_new_identity(gcs_bucket, stat_cache, tmp_path):
    data = f"{gcs_bucket}/raw"
    for i in range(3):
        fs.atomic_write(f"{data}/part-{i}.jsonl", json.dumps({"text": f"doc {i}"}) + "\n")
    prefix = str(tmp_path / "store")
    read, out = _graph(f"{data}/*.jsonl")
    assert _runner(prefix).run([out]).ok
    assert _graph(f"{data}/*.jsonl")[0].hash == read.hash
    # Written again with the same bytes (a new generation, as `gsutil cp` of an unchanged file makes):
    # the same identity, nothing to run.
    fs.atomic_write(f"{data}/part-1.jsonl", json.dumps({"text": "doc 1"}) + "\n")
    assert _graph(f"{data}/*.jsonl")[0].hash == read.hash
    assert {p.action for p in _plan_of(prefix, [_graph(f"{data}/*.jsonl")[1]]).values()} == {Action.CACHED}
    fs.atomic_write(f"{data}/part-1.jsonl", json.dumps({"text": "doc one, edited"}) + "\n")
    plan = _plan_of(prefix, [_graph(f"{data}/*.jsonl")[1]])
    [reason] = plan["data/concat"].reasons
    assert reason.kind is ReasonKind.SOURCE_CHANGED and reason.detail.endswith("raw/*.jsonl: 1 file changed (part-1.jsonl)")


def test_a_hub_dataset_at_a_new_commit_is_another_build(tmp_path, stat_cache, monkeypatch):
    hf_home = tmp_path / "hf"
    monkeypatch.setenv("HF_HOME", str(hf_home))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    files = {"data/train.jsonl": jsonl_bytes(["a story"] * 4)}
    write_hub_dataset(hf_home, "someone/stories", files, revision="a" * 40)
    handle = tokenized("tok/stories", source="someone/stories", tokenizer="gpt2")
    assert isinstance(handle.config.source, Source)
    first = Step("hub/read", concat, ConcatConfig(source("someone/stories")))
    h1 = first.hash
    write_hub_dataset(hf_home, "someone/stories", files, revision="b" * 40)
    again = Step("hub/read", concat, ConcatConfig(source("someone/stories")))
    assert again.hash != h1
    pinned = Step("hub/read", concat, ConcatConfig(source("someone/stories", revision="a" * 40)))
    assert pinned.hash != again.hash


def test_steps_that_read_no_source_keep_their_memoised_hash_and_source_steps_look_again(tmp_path, stat_cache):
    src = _corpus(tmp_path / "src", n=1)
    read, out = _graph(str(src / "d1.jsonl"))
    before = (read.hash, out.hash)
    assert "_hash" not in read.__dict__ and "_hash" not in out.__dict__
    (src / "d1.jsonl").write_text("changed\n")
    assert read.hash != before[0] and out.hash != before[1]
    plain = t.node("plain")
    digest = plain.hash
    assert plain.__dict__["_hash"] == digest
