"""Fuzzing of every reader and of the shard-index and step-record parsers with malformed bytes.

What every input must give: the documents (exactly those a simple model of the format predicts),
or a :class:`~zephyr.errors.DataError` naming the file, or (``on_error="skip"``) a counted skip;
never a hang, never another exception, never a silently short result. Readers that run native
code (pyarrow for Parquet, array_record for token shards) are fed in a sandbox subprocess, so an
interpreter crash is seen as a crash rather than taking the test run down with it.
"""

from __future__ import annotations

import gzip
import io
import json
import select
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import zstandard
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from marin.execution.store.manifest import compute_manifest, verify_manifest
from marin.execution.store.records import StepRecord
from marin.execution.store.store import StepStore
from marin.execution.store.verify import Verdict, verify_output
from zephyr.errors import DataError
from zephyr.readers import FileSlice, JsonlReader, TextMode, TextReader
from zephyr.shards import verify_shard_index
from zephyr.worker_context import Counters

# No example database: nothing is written into the checkout. deadline=None: files are written per example.
FUZZ = settings(max_examples=150, deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
NATIVE = settings(max_examples=60, deadline=None, database=None,
                  suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])

COMPRESSIONS = {"": lambda b: b, ".gz": lambda b: gzip.compress(b, mtime=0),
                ".zst": lambda b: zstandard.ZstdCompressor(write_checksum=True).compress(b)}

# Bytes that look like text and JSON lines often enough to reach the interesting branches.
_PIECES = st.sampled_from([b"\n", b"\r\n", b" ", b"{", b"}", b'"text"', b":", b",", b'"a"', b"1", b"null",
                           b"[", b"]", b"\xff", b"\xc3", b"\xa9", b"\x00", b"\t", b"\\", b'"', b"NaN", b"\xe2\x82"])
FUZZ_BYTES = st.one_of(st.binary(max_size=600), st.lists(_PIECES, max_size=80).map(b"".join))
MUTATION = st.tuples(st.sampled_from(["flip", "truncate", "insert", "delete"]), st.integers(0, 1 << 30),
                     st.integers(1, 255))

def mutate(data: bytes, mutation: tuple[str, int, int]) -> bytes:
    kind, where, value = mutation
    if not data:
        return bytes([value])
    i = where % len(data)
    if kind == "flip":
        return data[:i] + bytes([data[i] ^ value]) + data[i + 1:]
    if kind == "truncate":
        return data[:i]
    if kind == "insert":
        return data[:i] + bytes([value]) + data[i:]
    return data[:i] + data[i + 1:]


def _lines(data: bytes) -> list[bytes]:
    pieces = data.split(b"\n")
    lines = [p + b"\n" for p in pieces[:-1]]
    if pieces[-1]:
        lines.append(pieces[-1])
    return lines


def model_text(data: bytes) -> tuple[list[str], int]:
    """(documents, skipped lines) of TextReader in line mode: the format, written out plainly."""
    docs, skipped = [], 0
    for raw in _lines(data):
        try:
            text = raw.decode("utf-8").rstrip("\r\n")
        except UnicodeDecodeError:
            skipped += 1
            continue
        if text.strip():
            docs.append(text)
    return docs, skipped


def model_paragraphs(data: bytes) -> tuple[list[str], int]:
    docs, skipped, para = [], 0, []
    for raw in _lines(data):
        try:
            text = raw.decode("utf-8").rstrip("\r\n")
        except UnicodeDecodeError:
            skipped += 1
            continue
        if text.strip():
            para.append(text)
        elif para:
            docs.append("\n".join(para))
            para = []
    if para:
        docs.append("\n".join(para))
    return docs, skipped


def model_jsonl(data: bytes) -> tuple[list[str], int]:
    docs, skipped = [], 0
    for raw in _lines(data):
        try:
            text = raw.decode("utf-8").rstrip("\r\n")
        except UnicodeDecodeError:
            skipped += 1
            continue
        if not text.strip():
            continue
        try:
            obj = json.loads(text)
        except ValueError:
            skipped += 1
            continue
        if isinstance(obj, dict) and isinstance(obj.get("text"), str) and _valid_unicode(obj["text"]):
            docs.append(obj["text"])
        else:
            skipped += 1  # not an object with a text, or a text holding a lone surrogate ("\\ud800")
    return docs, skipped


def _valid_unicode(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


READERS = {
    "lines": (lambda on_error: TextReader(on_error=on_error), model_text, ".txt"),
    "paragraphs": (lambda on_error: TextReader(mode=TextMode.PARAGRAPHS, on_error=on_error), model_paragraphs, ".txt"),
    "jsonl": (lambda on_error: JsonlReader(on_error=on_error), model_jsonl, ".jsonl"),
}


def _read(reader, path: str, counters: Counters | None = None) -> list[str]:
    return list(reader.read(FileSlice(path), counters))


@pytest.fixture(scope="module")
def scratch():
    with tempfile.TemporaryDirectory(prefix="fuzz-") as d:
        yield Path(d)


@pytest.mark.parametrize("compression", sorted(COMPRESSIONS))
@pytest.mark.parametrize("kind", sorted(READERS))
@FUZZ
@given(data=FUZZ_BYTES)
def test_line_readers_give_exactly_the_documents_or_a_clear_error(scratch, fuzz_examples, kind, compression, data):
    make, model, ext = READERS[kind]
    path = str(scratch / f"in-{kind}{ext}{compression}")
    Path(path).write_bytes(COMPRESSIONS[compression](data))
    docs, skipped = model(data)
    fuzz_examples[f"{kind}{compression}"] += 1
    counters = Counters()
    assert _read(make("skip"), path, counters) == docs
    assert counters.get("skipped_records", 0) == skipped and not counters.get("skipped_files")
    if skipped:
        with pytest.raises(DataError) as info:
            _read(make("raise"), path)
        assert path in str(info.value)
    else:
        assert _read(make("raise"), path) == docs


@pytest.mark.parametrize("compression", [".gz", ".zst"])
@pytest.mark.parametrize("kind", sorted(READERS))
@FUZZ
@given(data=st.lists(st.text(min_size=1, max_size=40).filter(lambda t: t.strip() and "\n" not in t and "\r" not in t),
                     min_size=1, max_size=40), mutation=MUTATION)
def test_damaged_compressed_files_are_an_error_never_a_short_read(scratch, fuzz_examples, kind, compression, data, mutation):
    make, model, ext = READERS[kind]
    if kind == "jsonl":
        raw = "".join(json.dumps({"text": t}) + "\n" for t in data).encode()
    else:
        raw = "".join(t + "\n\n" for t in data).encode()
    packed = COMPRESSIONS[compression](raw)
    damaged = mutate(packed, mutation)
    path = str(scratch / f"dmg-{kind}{ext}{compression}")
    Path(path).write_bytes(damaged)
    expected, _ = model(raw)
    fuzz_examples[f"damaged {kind}{compression}"] += 1
    try:
        got = _read(make("raise"), path)
    except DataError as e:
        assert path in str(e)
        counters = Counters()
        _read(make("skip"), path, counters)  # the skip mode counts it instead
        assert counters.get("skipped_files", 0) + counters.get("skipped_records", 0) >= 1
        return
    if mutation[0] == "truncate" and len(damaged) < len(packed):
        # A cut stream must never read as a complete but shorter one.
        pytest.fail(f"truncated {compression} file read without error: {len(got)} of {len(expected)} docs")
    if compression == ".gz" or damaged == packed:
        # gzip checks a CRC of the data (zstd here too, written with a checksum), so what it returns is the data.
        assert got == expected


# -- native readers in a sandbox subprocess --------------------------------------------------------

_SANDBOX = r"""
import json, sys
from zephyr.errors import DataError
from zephyr.readers import FileSlice, ParquetReader
from zephyr.shards import TokenShardReader
from zephyr.worker_context import Counters
for line in sys.stdin:
    kind, path = json.loads(line)
    try:
        if kind == "parquet":
            counters = Counters()
            n = sum(1 for _ in ParquetReader(on_error="skip").read(FileSlice(path), counters))
            reply = {"ok": n, "counters": dict(counters)}
        else:
            with TokenShardReader(path) as r:
                reply = {"ok": sum(int(x.size) for x in r), "records": len(r)}
    except DataError as e:
        reply = {"error": "DataError", "message": str(e)}
    except Exception as e:
        reply = {"error": type(e).__name__, "message": str(e)}
    print(json.dumps(reply), flush=True)
"""


class Sandbox:
    """A long-lived subprocess that reads files with native readers; restarted after a crash."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen | None = None

    def _start(self) -> subprocess.Popen:
        if self.proc is None or self.proc.poll() is not None:
            self.proc = subprocess.Popen([sys.executable, "-c", _SANDBOX], stdin=subprocess.PIPE,
                                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        return self.proc

    def ask(self, kind: str, path: str, timeout: float = 60.0) -> dict:
        proc = self._start()
        proc.stdin.write(json.dumps([kind, path]) + "\n")
        proc.stdin.flush()
        ready, _, _ = select.select([proc.stdout], [], [], timeout)
        if not ready:
            proc.kill()
            proc.wait()
            return {"hang": timeout}
        line = proc.stdout.readline()
        if not line:
            code = proc.wait()
            return {"crash": code}
        return json.loads(line)

    def close(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.stdin.close()
            self.proc.wait(timeout=30)


@pytest.fixture(scope="module")
def sandbox():
    box = Sandbox()
    yield box
    box.close()


def _parquet_bytes(texts: list[str]) -> bytes:
    import pyarrow as pa
    import pyarrow.parquet as pq

    buffer = io.BytesIO()
    pq.write_table(pa.table({"text": texts, "n": list(range(len(texts)))}), buffer, row_group_size=8)
    return buffer.getvalue()


@pytest.mark.parametrize("compression", sorted(COMPRESSIONS))
@NATIVE
@given(texts=st.lists(st.text(max_size=30), min_size=1, max_size=40), mutation=MUTATION)
def test_damaged_parquet_is_a_clear_error_in_a_sandbox(scratch, fuzz_examples, sandbox, compression, texts, mutation):
    packed = COMPRESSIONS[compression](_parquet_bytes(texts))
    damaged = mutate(packed, mutation)
    path = str(scratch / f"dmg.parquet{compression}")
    Path(path).write_bytes(damaged)
    reply = sandbox.ask("parquet", path)
    fuzz_examples[f"damaged parquet{compression}"] += 1
    assert "crash" not in reply and "hang" not in reply, f"{reply} on {mutation}"
    if "error" in reply:
        assert reply["error"] == "DataError" and path in reply["message"], reply
    elif compression and mutation[0] == "truncate" and len(damaged) < len(packed):
        assert reply["counters"].get("skipped_files") == 1, reply  # a cut compressed file is a counted skip
    elif mutation[0] == "truncate" and len(damaged) < len(packed):
        pytest.fail(f"truncated parquet read without error: {reply}")


@NATIVE
@given(data=FUZZ_BYTES)
def test_random_bytes_as_parquet_and_token_shards(scratch, fuzz_examples, sandbox, data):
    for kind, name in (("parquet", "junk.parquet"), ("shard", "junk.array_record")):
        path = str(scratch / name)
        Path(path).write_bytes(data)
        reply = sandbox.ask(kind, path)
        fuzz_examples[f"random bytes as {kind}"] += 1
        assert "crash" not in reply and "hang" not in reply, reply
        if kind == "parquet" and "ok" in reply:
            continue  # zero bytes of a valid file cannot come from random bytes; any reply shape is fine
        if "error" in reply:
            assert reply["error"] == "DataError" and path in reply["message"], reply
        else:
            assert reply.get("records", 0) == 0 or kind == "parquet", reply


def _shard_bytes(records: list[list[int]], folder: Path) -> bytes:
    from array_record.python.array_record_module import ArrayRecordWriter

    path = str(folder / "valid.array_record")
    writer = ArrayRecordWriter(path, "group_size:1")
    for ids in records:
        writer.write(b"".join(int(i).to_bytes(4, "little") for i in ids))
    writer.close()
    return Path(path).read_bytes()


@NATIVE
@given(records=st.lists(st.lists(st.integers(0, 2**32 - 1), min_size=1, max_size=20), min_size=1, max_size=30),
       mutation=MUTATION)
def test_damaged_token_shards_are_a_clear_error_in_a_sandbox(scratch, fuzz_examples, sandbox, records, mutation):
    packed = _shard_bytes(records, scratch)
    damaged = mutate(packed, mutation)
    path = str(scratch / "dmg.array_record")
    Path(path).write_bytes(damaged)
    reply = sandbox.ask("shard", path)
    fuzz_examples["damaged token shard"] += 1
    assert "crash" not in reply and "hang" not in reply, f"{reply} on {mutation}"
    if "error" in reply:
        assert reply["error"] == "DataError" and path in reply["message"], reply
    elif mutation[0] == "truncate" and len(damaged) < len(packed):
        assert reply["records"] == len(records) and reply["ok"] == sum(map(len, records)), \
            f"truncated shard read short without error: {reply}"


# -- the shard index -----------------------------------------------------------------------------

def _index_folder(root: Path) -> Path:
    folder = Path(tempfile.mkdtemp(dir=root))
    (folder / "train").mkdir()
    (folder / "train" / "part-00000.array_record").write_bytes(b"0123456789abcdef")
    import hashlib

    shard = {"path": "train/part-00000.array_record", "records": 1, "tokens": 4, "bytes": 16,
             "sha256": hashlib.sha256(b"0123456789abcdef").hexdigest()}
    index = {"format": "x", "splits": {"train": {"records": 1, "tokens": 4, "shards": [shard]}}}
    (folder / "index.json").write_text(json.dumps(index, sort_keys=True, indent=2))
    return folder


JSON_VALUES = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
                           lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
                           max_leaves=12)


@FUZZ
@given(data=st.one_of(FUZZ_BYTES, JSON_VALUES.map(lambda v: json.dumps(v).encode())), mutation=MUTATION,
       use_mutation=st.booleans())
def test_shard_index_damage_is_a_clear_error(scratch, fuzz_examples, data, mutation, use_mutation):
    folder = _index_folder(scratch)
    index_path = folder / "index.json"
    original = index_path.read_bytes()
    damaged = mutate(original, mutation) if use_mutation else data
    index_path.write_bytes(damaged)
    fuzz_examples["shard index"] += 1
    try:
        index = verify_shard_index(str(folder))
    except DataError as e:
        assert str(folder) in str(e)
        return
    # Accepted: then it still names the one real shard with its true size and checksum.
    groups = index["splits"].values() if "splits" in index else [index]
    assert all(s["bytes"] == 16 and s["path"] == "train/part-00000.array_record" for g in groups for s in g["shards"])


# -- step records: success, manifest, provenance, status, lease --------------------------------------

def _done_step(root: Path, name: str = "a") -> str:
    out = Path(tempfile.mkdtemp(dir=root)) / f"{name}-0123456789abcdef"
    out.mkdir()
    (out / "data.txt").write_text("payload\n")
    record = StepRecord(str(out))
    manifest = compute_manifest(str(out))
    record.write_json(record.manifest, manifest)
    record.write_json(record.provenance, {"name": name, "version": "v1", "config_flat": {"x": '["int","1"]'}})
    record.write_json(record.status, {"state": "running", "attempt": 1, "holder": "h:1:x"})
    import hashlib

    digest = hashlib.sha256(json.dumps(manifest["files"], sort_keys=True).encode()).hexdigest()
    record.write_json(record.success, {"hash": "0" * 64, "name": name, "finished_at": time.time(),
                                       "manifest_sha256": digest})
    return str(out)


@FUZZ
@given(which=st.sampled_from(["success.json", "manifest.json", "provenance.json", "status.json",
                              "lease-00000001.json"]),
       data=st.one_of(FUZZ_BYTES, JSON_VALUES.map(lambda v: json.dumps(v).encode())))
def test_damaged_step_records_never_crash_the_engine(scratch, fuzz_examples, which, data):
    from marin.cli.cmd_status import step_state
    from rigging.lease import Lease, current_lease

    out = _done_step(scratch)
    target = Path(out) / ".marin" / which
    target.write_bytes(data)
    fuzz_examples[f"record {which}"] += 1
    record = StepRecord(out)
    for path in (record.success, record.manifest, record.provenance, record.status):
        value = record.read_json(path)
        assert value is None or isinstance(value, dict)
    check = verify_output("a", out)
    if which in ("success.json", "manifest.json"):
        # The promise of a finished step cannot be checked any more: that is reported, never "ok"
        # unless the record still says exactly what the folder holds.
        if check.verdict is Verdict.OK:
            assert verify_manifest(out, record.read_json(record.manifest)) == []
    else:
        assert check.verdict is Verdict.OK, check
    step_state(out)  # marin status
    StepStore(str(Path(out).parent)).earlier_builds("a")  # planning reads old builds' records
    lease_info = current_lease(record.meta)
    if which.startswith("lease"):
        assert lease_info is not None
        # A damaged lease is treated as expired or held, never as an exception.
        Lease.acquire(record.meta, ttl=5)


@FUZZ
@given(data=st.one_of(FUZZ_BYTES, JSON_VALUES.map(lambda v: json.dumps(v).encode())),
       which=st.sampled_from(["success.json", "provenance.json", "status.json", "lease-00000001.json"]))
def test_planning_survives_damaged_records_of_earlier_builds(scratch, fuzz_examples, data, which):
    from marin.execution.core.step import Step
    from marin.execution.plan.make import make_plan

    prefix = Path(tempfile.mkdtemp(dir=scratch))
    step = Step("fz/step", probe_fn, config={"x": 2})
    # An earlier build of the same name (another hash), and a killed attempt at this hash.
    old = prefix / "fz" / "step-00000000deadbeef"
    shutil_copy(Path(_done_step(scratch, "step")), old)
    (old / ".marin" / which).write_bytes(data)
    this = prefix / f"{step.output_name}" / ".marin"
    this.mkdir(parents=True)
    (this / which).write_bytes(data)
    fuzz_examples[f"plan with damaged {which}"] += 1
    plan = make_plan([step], StepStore(str(prefix)), explain=True)
    (planned,) = plan.steps
    if which == "success.json":
        # Done means "the success record exists" (it is only ever created whole); `marin verify`
        # is what reports a damaged one.
        assert planned.action.value == "cached"
        assert verify_output("fz/step", planned.output_path).verdict is Verdict.BROKEN
    else:
        assert planned.action.value == "run" and planned.reasons


def probe_fn(config, output_path):
    """A step function for planning only (never run)."""


def shutil_copy(src: Path, dst: Path) -> None:
    import shutil

    dst.parent.mkdir(parents=True, exist_ok=True)
    shutil.copytree(src, dst)


@pytest.mark.parametrize("provenance", [
    {"config_flat": {"x": 5}}, {"config_flat": {"x": None, "y": ["dep"]}}, {"config_flat": []},
    {"version": 3, "fn": ["a"]}, {"config_flat": {"x": '["dep"'}}, [], "text",
])
def test_odd_but_valid_json_provenance_of_an_earlier_build_still_plans(tmp_path, provenance):
    from marin.execution.core.step import Step
    from marin.execution.plan.make import make_plan

    old = tmp_path / "fz" / "step-00000000deadbeef"
    shutil_copy(Path(_done_step(tmp_path, "step")), old)
    (old / ".marin" / "provenance.json").write_text(json.dumps(provenance))
    plan = make_plan([Step("fz/step", probe_fn, config={"x": 2})], StepStore(str(tmp_path)), explain=True)
    assert plan.steps[0].action.value == "run" and plan.steps[0].reasons
