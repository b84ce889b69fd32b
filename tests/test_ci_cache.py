"""Cached CI rebuilds end to end (issue 6): the real ``marin`` CLI and ``make`` on real folders.

The cache tests use a small generated experiment (``testsupport.e2e.PIPELINE``); the tests
that the issue states for ``make experiments`` run the real ``experiments/`` folder, built once
per pytest process (see ``testsupport.e2e.experiments_prefix``).
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import sys
from pathlib import Path

import pytest

from marin.execution.store import done_index
from marin.execution.store.manifest import verify_manifest
from marin.execution.store.records import StepRecord
from testsupport.e2e import (
    PIPELINE_STEPS,
    ROOT,
    actions,
    builds_experiments,
    clean_env,
    edit,
    entry,
    events,
    experiments_prefix,
    make_experiments,
    marin,
    pipeline_total,
    plan_json,
    run,
    steps_by_name,
    success_records,
    write_pipeline,
)


def _read_json(path: Path) -> dict:
    return json.loads(path.read_text())


def _assert_entry_sound(path: Path) -> None:
    """A finished output whose files match its manifest."""
    record = StepRecord(str(path))
    assert record.is_done(), f"{path} has no success record"
    manifest = record.read_json(record.manifest)
    assert manifest is not None, f"{path} has no manifest"
    assert verify_manifest(str(path), manifest) == [], f"{path} does not match its manifest"


@pytest.fixture
def pipeline(tmp_path: Path) -> tuple[Path, Path]:
    """The small experiment file and a prefix where it has been built once."""
    exp = write_pipeline(tmp_path / "exp")
    prefix = tmp_path / "prefix"
    first = marin("run", str(exp), "--prefix", str(prefix))
    assert sorted(events(first.stdout, "ran")) == sorted(PIPELINE_STEPS), first.describe()
    return exp, prefix


# -- make experiments ---------------------------------------------------------------------------

@builds_experiments
@pytest.mark.slow
def test_make_experiments_twice_the_second_run_executes_no_step(tmp_path_factory: pytest.TempPathFactory) -> None:
    prefix, first = experiments_prefix(tmp_path_factory)
    # The first run built what train_nano had not (the seed example, hello world ...).
    assert "checkpoints/marin-nano-tinystories" in events(first.stdout, "ran"), first.describe()
    before = success_records(prefix)
    assert len(before) >= 8, sorted(before)

    second = make_experiments(prefix)

    assert events(second.stdout, "start") == [], second.describe()
    assert events(second.stdout, "ran") == [], second.describe()
    summary = second.stdout.strip().splitlines()
    assert re.search(r"^plan: (\d+) steps: \1 cached$", second.stdout, re.M), second.describe()
    counts = [line for line in summary if re.fullmatch(r"\d+ \w+(, \d+ [\w :]+)*", line)]
    assert counts and re.fullmatch(r"\d+ cached", counts[-1]), second.describe()
    assert success_records(prefix) == before, "a success record was rewritten by the no-op run"
    assert second.seconds < 30, f"the no-op run took {second.seconds:.1f}s"


# -- editing one config --------------------------------------------------------------------------

def test_editing_one_config_reruns_exactly_that_step_and_its_dependents(pipeline: tuple[Path, Path]) -> None:
    exp, prefix = pipeline
    before = success_records(prefix)
    edit(exp, "factor=2))", "factor=3))")

    plan = plan_json(str(exp), "--prefix", str(prefix))
    assert actions(plan) == {"pipe/base": "cached", "pipe/stats": "cached", "pipe/scaled": "run",
                             "pipe/total": "run", "pipe/other": "cached"}
    steps = steps_by_name(plan)
    scaled_reasons = steps["pipe/scaled"]["reasons"]
    assert [r["kind"] for r in scaled_reasons] == ["config_changed"], scaled_reasons
    assert "factor" in scaled_reasons[0]["detail"] and "2 → 3" in scaled_reasons[0]["detail"], scaled_reasons
    assert [r["kind"] for r in steps["pipe/total"]["reasons"]] == ["upstream_changed"]
    assert "pipe/scaled" in steps["pipe/total"]["reasons"][0]["detail"]

    ran = marin("run", str(exp), "--prefix", str(prefix))
    assert sorted(events(ran.stdout, "start")) == ["pipe/scaled", "pipe/total"], ran.describe()
    after = success_records(prefix)
    for rel, mtime in before.items():
        assert after.get(rel) == mtime, f"{rel} was rebuilt or removed"
    assert len(after) == len(before) + 2
    new_total = Path(steps["pipe/total"]["output_path"]) / "total.json"
    assert _read_json(new_total) == {"total": pipeline_total(factor=3)}
    # And back: the old builds are still there, so undoing the edit runs nothing.
    edit(exp, "factor=3))", "factor=2))")
    assert set(actions(plan_json(str(exp), "--prefix", str(prefix))).values()) == {"cached"}


# -- --require-cached ----------------------------------------------------------------------------

def test_require_cached_fails_naming_the_step_whose_config_changed(pipeline: tuple[Path, Path]) -> None:
    exp, prefix = pipeline
    ok = marin("run", "--require-cached", str(exp), "--prefix", str(prefix))
    assert events(ok.stdout, "start") == []

    before = success_records(prefix)
    folders = sorted(p.name for p in (prefix / "pipe").iterdir())
    edit(exp, "factor=2))", "factor=5))")
    refused = marin("run", "--require-cached", str(exp), "--prefix", str(prefix), check=False)

    assert refused.returncode != 0, refused.describe()
    message = refused.stderr
    assert "pipe/scaled" in message and "pipe/total" in message, refused.describe()
    for untouched in ("pipe/base", "pipe/stats", "pipe/other"):
        assert untouched not in message, refused.describe()
    assert "Traceback" not in message
    assert events(refused.stdout, "start") == []
    assert success_records(prefix) == before
    assert sorted(p.name for p in (prefix / "pipe").iterdir()) == folders, "a step output was started"


# -- a second checkout, a fresh prefix, the first prefix as cache ------------------------------

def _copy_checkout(dst: Path) -> Path:
    """The files a checkout needs to define the experiments (the packages come from this venv)."""
    dst.mkdir(parents=True)
    for name in ("pyproject.toml", "uv.lock", "flake.lock"):
        shutil.copy2(ROOT / name, dst / name)
    shutil.copytree(ROOT / "experiments", dst / "experiments",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    if (ROOT / "config").is_dir():
        shutil.copytree(ROOT / "config", dst / "config")
    return dst


@builds_experiments
@pytest.mark.slow
def test_a_second_checkout_gets_cache_hits_for_every_step(tmp_path: Path,
                                                          tmp_path_factory: pytest.TempPathFactory) -> None:
    cache, _ = experiments_prefix(tmp_path_factory)
    other = _copy_checkout(tmp_path / "somewhere" / "else" / "checkout")
    fresh = tmp_path / "fresh-prefix"
    env = clean_env(USER="someone-else", LOGNAME="someone-else", HOME=str(tmp_path / "home"))
    env.pop("PYTHONPATH", None)
    (tmp_path / "home").mkdir()

    here = plan_json("experiments/", "--prefix", str(cache))
    assert set(actions(here).values()) == {"cached"}, actions(here)
    there = plan_json("experiments/", "--prefix", str(fresh), "--cache", str(cache), cwd=other, env=env)

    assert {s["name"]: s["hash"] for s in there["steps"]} == {s["name"]: s["hash"] for s in here["steps"]}
    assert "run" not in actions(there).values(), actions(there)
    fetched = [s for s in there["steps"] if s["action"] == "fetch"]
    assert fetched, actions(there)
    assert all(s["cache"] == str(cache) for s in fetched)
    # Steps a fetched output covers are not needed here; every one is nonetheless in the cache.
    for s in there["steps"]:
        assert s["action"] in ("fetch", "unneeded"), s
        assert StepRecord(str(cache / f"{s['name']}-{s['hash'][:16]}")).is_done(), s

    ran = marin("run", "--require-cached", "experiments/", "--prefix", str(fresh), "--cache", str(cache),
                cwd=other, env=env)
    assert events(ran.stdout, "start") == [], ran.describe()
    assert events(ran.stdout, "ran") == [], ran.describe()
    assert sorted(events(ran.stdout, "cached")) == sorted(s["name"] for s in fetched), ran.describe()
    for s in fetched:
        _assert_entry_sound(Path(s["output_path"]))
    again = plan_json("experiments/", "--prefix", str(fresh), cwd=other, env=env)
    assert {s["name"] for s in again["steps"] if s["action"] == "cached"} == {s["name"] for s in fetched}
    assert "run" not in actions(again).values(), actions(again)


# -- corrupt and partial cache entries --------------------------------------------------------

def test_corrupt_or_partial_cache_entries_are_refused_and_rebuilt_with_a_warning(
        pipeline: tuple[Path, Path], tmp_path: Path) -> None:
    exp, cache = pipeline
    total = entry(cache, "pipe/total")
    stats = entry(cache, "pipe/stats")
    scaled = entry(cache, "pipe/scaled")
    other = entry(cache, "pipe/other")
    # A changed byte (same size), a missing file, a missing manifest, a missing success record.
    data = bytearray((total / "total.json").read_bytes())
    data[-2] = ord("7") if data[-2] != ord("7") else ord("8")
    (total / "total.json").write_bytes(bytes(data))
    (stats / "stats.json").unlink()
    (scaled / ".marin" / "manifest.json").unlink()
    (other / ".marin" / "success.json").unlink()

    fresh = tmp_path / "fresh"
    plan = plan_json(str(exp), "--prefix", str(fresh), "--cache", str(cache))
    # Entries with a success record look like hits until they are copied and checked;
    # one without a success record is no entry at all.
    assert actions(plan) == {"pipe/base": "unneeded", "pipe/stats": "fetch", "pipe/scaled": "unneeded",
                             "pipe/total": "fetch", "pipe/other": "run"}

    ran = marin("run", str(exp), "--prefix", str(fresh), "--cache", str(cache))

    warnings = [line for line in ran.stderr.splitlines() if "WARNING" in line or "warning" in line]
    def warned(path: Path, why: str) -> bool:
        return any(str(path) in line and why in line and "rebuilding" in line for line in warnings)
    assert warned(total, "total.json: checksum changed"), ran.describe()
    assert warned(stats, "stats.json: missing"), ran.describe()
    assert warned(scaled, "no readable manifest"), ran.describe()
    assert sorted(events(ran.stdout, "start")) == ["pipe/other", "pipe/scaled", "pipe/stats", "pipe/total"], \
        ran.describe()
    assert events(ran.stdout, "cached") == ["pipe/base"], ran.describe()  # fetched: its entry is sound

    assert _read_json(entry(fresh, "pipe/total") / "total.json") == {"total": pipeline_total()}
    assert _read_json(entry(fresh, "pipe/stats") / "stats.json") == {"count": 50, "sum": pipeline_total(factor=1)}
    assert (entry(fresh, "pipe/other") / "other.txt").read_text() == "hello"
    for name in PIPELINE_STEPS:
        _assert_entry_sound(entry(fresh, name))
    # The cache is read-only: nothing there was repaired or removed.
    assert (total / "total.json").read_bytes() == bytes(data)
    assert not (stats / "stats.json").exists()


def test_a_cache_entry_without_its_success_record_is_refused_with_a_warning(
        pipeline: tuple[Path, Path], tmp_path: Path) -> None:
    """A partial entry (files, manifest and provenance, but no success record, as an interrupted
    push leaves it) is not used, is rebuilt, and the user is told which entry was passed over."""
    exp, cache = pipeline
    other = entry(cache, "pipe/other")
    (other / ".marin" / "success.json").unlink()

    fresh = tmp_path / "fresh"
    ran = marin("run", str(exp), "--prefix", str(fresh), "--cache", str(cache))

    assert "pipe/other" in events(ran.stdout, "start"), ran.describe()
    assert (entry(fresh, "pipe/other") / "other.txt").read_text() == "hello"
    warnings = [line for line in ran.stderr.splitlines() if str(other) in line]
    assert any("WARNING" in line and "success" in line for line in warnings), \
        f"no warning names the partial cache entry {other}\n{ran.describe()}"


# -- marin push ---------------------------------------------------------------------------------

_INTERRUPTED_PUSH = """
import json, os, sys
import rigging.filesystem as f

report, argv = sys.argv[1], sys.argv[2:]
original = f.create_if_absent

def die_before_success(path, *args, **kwargs):
    path = str(path)
    if path.endswith("/.marin/success.json"):
        entry = path[: -len("/.marin/success.json")]
        files = sorted(os.path.relpath(os.path.join(d, n), entry) for d, _, ns in os.walk(entry) for n in ns)
        with open(report, "w") as out:
            json.dump({"entry": entry, "files": files}, out)
        os._exit(9)  # killed: the success record is never written
    return original(path, *args, **kwargs)

f.create_if_absent = die_before_success
from marin.cli.main import main
main(argv)
"""


def test_push_publishes_atomically_with_the_success_record_last(pipeline: tuple[Path, Path],
                                                                 tmp_path: Path) -> None:
    exp, prefix = pipeline
    cache = tmp_path / "cache"
    report = tmp_path / "push-report.json"
    killed = run([sys.executable, "-c", _INTERRUPTED_PUSH, str(report),
                  "push", str(exp), "--prefix", str(prefix), "--to", str(cache)], check=False)
    assert killed.returncode == 9, killed.describe()

    # At the moment the success record was due, everything else of the entry was already there.
    seen = _read_json(report)
    name = Path(seen["entry"]).relative_to(cache)
    src = prefix / name
    expected = sorted(str(p.relative_to(src)) for p in src.rglob("*") if p.is_file()
                      and p.name not in ("success.json", "status.json") and not p.name.startswith("lease-"))
    assert seen["files"] == expected
    assert ".marin/manifest.json" in seen["files"] and ".marin/provenance.json" in seen["files"]
    assert not list(cache.rglob("success.json")), "an interrupted push left a success record"

    # The half-pushed entry is not a hit.
    fresh = tmp_path / "fresh"
    plan = plan_json(str(exp), "--prefix", str(fresh), "--cache", str(cache))
    assert "fetch" not in actions(plan).values(), actions(plan)
    refused = marin("run", "--require-cached", str(exp), "--prefix", str(fresh), "--cache", str(cache),
                    check=False)
    assert refused.returncode != 0 and "pipe/base" in refused.stderr, refused.describe()

    # A complete push over it publishes every step, and then it is a hit.
    pushed = marin("push", str(exp), "--prefix", str(prefix), "--to", str(cache))
    assert len(re.findall(r"^pushed pipe/", pushed.stdout, re.M)) == len(PIPELINE_STEPS), pushed.describe()
    for step in PIPELINE_STEPS:
        _assert_entry_sound(entry(cache, step))
        assert not list((entry(cache, step) / ".marin").glob("status.json"))
    ran = marin("run", "--require-cached", str(exp), "--prefix", str(fresh), "--cache", str(cache))
    assert events(ran.stdout, "start") == [], ran.describe()
    assert _read_json(entry(fresh, "pipe/total") / "total.json") == {"total": pipeline_total()}


# -- the environment fingerprint ------------------------------------------------------------------

def test_strict_env_puts_the_fingerprint_in_the_hash(tmp_path: Path) -> None:
    exp = write_pipeline(tmp_path / "exp")
    prefix = tmp_path / "prefix"
    plain = {s["name"]: s["hash"] for s in plan_json(str(exp), "--prefix", str(prefix))["steps"]}
    strict = {s["name"]: s["hash"] for s in plan_json(str(exp), "--prefix", str(prefix), "--strict-env")["steps"]}
    assert set(plain) == set(strict) == set(PIPELINE_STEPS)
    for name in PIPELINE_STEPS:
        assert plain[name] != strict[name], name
    # Deterministic: the same environment gives the same strict hashes.
    again = {s["name"]: s["hash"] for s in plan_json(str(exp), "--prefix", str(prefix), "--strict-env")["steps"]}
    assert again == strict

    marin("run", "--strict-env", str(exp), "--prefix", str(prefix))
    assert set(actions(plan_json(str(exp), "--prefix", str(prefix), "--strict-env")).values()) == {"cached"}
    assert "cached" not in actions(plan_json(str(exp), "--prefix", str(prefix))).values()
    prov = _read_json(prefix / f"pipe/other-{strict['pipe/other'][:16]}" / ".marin" / "provenance.json")
    assert prov["strict_env"] is True


def test_plan_notes_a_cached_step_built_in_a_different_environment(pipeline: tuple[Path, Path]) -> None:
    exp, prefix = pipeline
    other = entry(prefix, "pipe/other")
    provenance_path = other / ".marin" / "provenance.json"
    prov = _read_json(provenance_path)
    env = prov["environment"]
    assert env["uv_lock_sha256"] == hashlib.sha256((ROOT / "uv.lock").read_bytes()).hexdigest()
    assert env["flake_lock_sha256"] == hashlib.sha256((ROOT / "flake.lock").read_bytes()).hexdigest()
    assert env["packages"]["jax"] and env["packages"]["marin"], env["packages"]
    assert re.fullmatch(r"[0-9a-f]{64}", prov["env_digest"])

    plan = plan_json(str(exp), "--prefix", str(prefix))
    assert set(actions(plan).values()) == {"cached"}
    assert all(s["env_note"] is None for s in plan["steps"]), plan

    # As if built with another uv.lock: its provenance and its done marker both name that environment.
    prov["env_digest"] = "0" * 64
    provenance_path.write_text(json.dumps(prov))
    output_name = other.relative_to(prefix).as_posix()
    done_index.unmark(str(prefix), [output_name])
    done_index.mark(str(prefix), output_name, prov["env_digest"])
    plan = plan_json(str(exp), "--prefix", str(prefix))
    assert set(actions(plan).values()) == {"cached"}  # without --strict-env it stays a hit
    notes = {s["name"]: s["env_note"] for s in plan["steps"]}
    assert notes.pop("pipe/other") == "built in a different environment"
    assert set(notes.values()) == {None}, notes
    text = marin("plan", str(exp), "--prefix", str(prefix))
    line = next(li for li in text.stdout.splitlines() if "pipe/other" in li)
    assert "different environment" in line, text.describe()
