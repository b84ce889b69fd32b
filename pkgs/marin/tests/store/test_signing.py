"""Keys written as Nix writes them, the fingerprint a signature covers, and why an entry is refused
(``marin.execution.store.signing``)."""

from __future__ import annotations

import base64
import os
import stat

import pytest

from marin.execution.run.settings import RunSettings
from marin.execution.store.signature_record import EntrySignatures, Signature
from marin.execution.store.signing import (
    BadKey,
    Fingerprint,
    PublicKey,
    SecretKey,
    read_secret_key,
    refusal,
    sign,
    signing_key,
    trusted_keys,
    write_secret_key,
)
from marin.execution.store.success_record import SuccessRecord
from rigging.config.discovery import ConfigError, discover_config

MANIFEST = {"files": [{"path": "out.txt", "size": 5, "sha256": "ab" * 32}], "total_bytes": 5}
SUCCESS = SuccessRecord(hash="c" * 64, name="s/x", output_digest="d" * 64, realisation_key="e" * 64,
                        inputs=[{"name": "s/up", "hash": "f" * 64, "digest": "0" * 64}])


def _fingerprint(manifest: dict = MANIFEST, success: SuccessRecord = SUCCESS) -> Fingerprint:
    return Fingerprint.of("s/x-cccccccccccccccc", "c" * 64, manifest, success)


def test_keys_are_written_name_colon_base64_as_nix_writes_them(tmp_path):
    key = SecretKey.generate("ci.example.org-1")
    path = str(tmp_path / "keys" / "ci.secret")
    write_secret_key(path, key)
    text = open(path).read()
    name, _, data = text.partition(":")
    assert name == "ci.example.org-1" and len(base64.b64decode(data, validate=True)) == 64
    assert not text.endswith("\n")  # as `nix key generate-secret` writes it
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert read_secret_key(path) == key
    public = str(key.public())
    assert public.startswith("ci.example.org-1:") and len(base64.b64decode(public.partition(":")[2])) == 32
    assert PublicKey.parse(public) == key.public()
    # The second half of a secret key is its public key (libsodium's layout, Nix's files).
    assert key.secret[32:] == key.public().key
    # Nix's own public keys parse as they are written.
    nixos = PublicKey.parse("cache.nixos.org-1:6NCHdD59X431o0gWypbMrAURkbJ16ZPMQFGspcDShjY=")
    assert nixos.name == "cache.nixos.org-1" and len(nixos.key) == 32
    # A key file is never overwritten, nor is the secret shown.
    with pytest.raises(FileExistsError):
        write_secret_key(path, SecretKey.generate("other"))
    assert read_secret_key(path) == key
    assert data not in repr(key)


@pytest.mark.parametrize("text, why", [
    ("ci-1", "not a public key written name:base64"),
    (":AAAA", "not a public key written name:base64"),
    ("ci-1:not base64!", "the public key named 'ci-1' is not base64"),
    ("ci-1:" + base64.b64encode(b"x" * 31).decode(), "is not an ed25519 public key (31 bytes, not 32)"),
])
def test_a_malformed_public_key_says_why(text, why):
    with pytest.raises(BadKey, match=__import__("re").escape(why)):
        PublicKey.parse(text)


def test_keys_of_the_wrong_kind_are_named_and_a_secret_is_never_shown(tmp_path):
    key = SecretKey.generate("ci-1")
    secret_text = f"ci-1:{base64.b64encode(key.secret).decode()}"
    with pytest.raises(BadKey) as given_as_public:
        PublicKey.parse(secret_text)
    assert "is a secret key, not a public key" in str(given_as_public.value)
    assert base64.b64encode(key.secret).decode() not in str(given_as_public.value)
    with pytest.raises(BadKey, match="is a public key, not a secret key"):
        SecretKey.parse(str(key.public()))
    swapped = key.secret[:32] + SecretKey.generate("x").secret[32:]  # halves of two keys
    with pytest.raises(BadKey, match="is not an ed25519 secret key"):
        SecretKey.parse(f"ci-1:{base64.b64encode(swapped).decode()}")
    pem = tmp_path / "id_ed25519"
    pem.write_text("-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n")
    with pytest.raises(BadKey, match=rf"^{pem}: not a secret key written name:base64"):
        read_secret_key(str(pem))
    with pytest.raises(BadKey, match=rf"^{tmp_path}/missing: no such file$"):
        read_secret_key(str(tmp_path / "missing"))
    with pytest.raises(BadKey, match="a key's name is letters, digits"):
        SecretKey.generate("a:b")


def test_the_fingerprint_is_pinned():
    # What a signature covers, byte for byte: a change here invalidates every signed cache entry.
    assert _fingerprint().message() == (
        b'marin-cache-entry/1\n{"hash":"' + b"c" * 64 + b'","inputs":[{"digest":"' + b"0" * 64
        + b'","hash":"' + b"f" * 64 + b'","name":"s/up"}],"manifest_sha256":'
        b'"015f4e7f6f4dc0c86a0ad66c55ae23ccc0b4183e8514d76ea0ccb1afa7655b1e","output":"s/x-cccccccccccccccc",'
        b'"output_digest":"' + b"d" * 64 + b'","realisation_key":"' + b"e" * 64 + b'"}')


def test_a_signed_entry_is_accepted_by_its_key_only():
    ci, other = SecretKey.generate("ci-1"), SecretKey.generate("ci-2")
    record = sign(_fingerprint(), ci)
    assert record.signed == _fingerprint().to_json() and [s.key for s in record.signatures] == ["ci-1"]
    assert EntrySignatures.from_json(record.to_json()) == record
    assert refusal(_fingerprint(), record, [ci.public()]) is None
    assert refusal(_fingerprint(), record, [other.public(), ci.public()]) is None  # rotation: either one
    assert refusal(_fingerprint(), None, [ci.public()]) == "not signed (trusted keys: ci-1)"
    assert refusal(_fingerprint(), EntrySignatures(), [ci.public()]) == "not signed (trusted keys: ci-1)"
    assert refusal(_fingerprint(), record, [other.public()]) == \
        "signed only by keys that are not trusted (ci-1; trusted keys: ci-2)"
    # Another key under a trusted key's name signs nothing for it.
    impostor = sign(_fingerprint(), SecretKey.generate("ci-2"))
    assert refusal(_fingerprint(), impostor, [other.public()]) == (
        "the signature by ci-2 does not match the entry: not a valid signature of it "
        "(made by another key of that name, or the entry was altered)")


@pytest.mark.parametrize("change, what", [
    (lambda m, s: ({"files": [{**m["files"][0], "sha256": "99" * 32}]}, s), "manifest"),
    (lambda m, s: (m, SuccessRecord(**{**SUCCESS.__dict__, "output_digest": "1" * 64})), "output digest"),
    (lambda m, s: (m, SuccessRecord(**{**SUCCESS.__dict__, "realisation_key": "2" * 64})), "realisation key"),
    (lambda m, s: (m, SuccessRecord(**{**SUCCESS.__dict__, "inputs": []})), "inputs"),
])
def test_an_entry_altered_after_signing_is_refused_naming_what_changed(change, what):
    ci = SecretKey.generate("ci-1")
    record = sign(_fingerprint(), ci)
    altered = _fingerprint(*change(MANIFEST, SUCCESS))
    assert refusal(altered, record, [ci.public()]) == \
        f"the signature by ci-1 does not match the entry: its {what} changed after signing"
    # Under another step's name or hash the same signature is no signature either.
    for moved in (Fingerprint.of("s/y-cccccccccccccccc", "c" * 64, MANIFEST, SUCCESS),
                  Fingerprint.of("s/x-cccccccccccccccc", "c" * 63 + "0", MANIFEST, SUCCESS)):
        assert "changed after signing" in (refusal(moved, record, [ci.public()]) or "")


def test_signing_keeps_other_keys_signatures_of_the_same_entry_only():
    ci1, ci2 = SecretKey.generate("ci-1"), SecretKey.generate("ci-2")
    both = sign(_fingerprint(), ci2, sign(_fingerprint(), ci1))
    assert [s.key for s in both.signatures] == ["ci-1", "ci-2"]
    assert refusal(_fingerprint(), both, [ci1.public()]) is None and refusal(_fingerprint(), both, [ci2.public()]) is None
    again = sign(_fingerprint(), ci2, both)  # signing twice with one key keeps one signature of it
    assert [s.key for s in again.signatures] == ["ci-1", "ci-2"]
    other_build = _fingerprint({"files": []})
    assert [s.key for s in sign(other_build, ci2, both).signatures] == ["ci-2"]  # ci-1 signed another build


def test_a_signatures_record_reads_what_it_can():
    assert EntrySignatures.from_json("nonsense") is None
    record = EntrySignatures.from_json({"signed": {"output": "x"}, "signatures": [{"key": "a", "sig": "b"}, 3, {}],
                                        "future": 1})
    assert record is not None and record.signatures == (Signature("a", "b"),) and record.extra == {"future": 1}
    assert record.to_json()["future"] == 1 and record.to_json()["format"] == 1


# -- configuration -------------------------------------------------------------------------------

def test_trusted_keys_come_from_the_environment_comma_separated(tmp_path):
    one, two = (str(SecretKey.generate(n).public()) for n in ("ci-1", "ci-2"))
    config = discover_config(cwd=tmp_path, environ={"MARIN_CACHE_TRUSTED_KEYS": f" {one}, {two},", "HOME": str(tmp_path)})
    assert config.cache_trusted_keys == (one, two)
    settings = RunSettings.of(config, prefix=str(tmp_path / "store"))
    assert [k.name for k in settings.cache_trusted_keys] == ["ci-1", "ci-2"]
    assert RunSettings.of(config, prefix=str(tmp_path), cache_trusted_keys=[two]).cache_trusted_keys == \
        (PublicKey.parse(two),)


def test_a_malformed_trusted_key_is_a_configuration_error_naming_the_setting(tmp_path):
    config = discover_config(cwd=tmp_path, environ={"MARIN_CACHE_TRUSTED_KEYS": "ci-1:abcd", "HOME": str(tmp_path)})
    with pytest.raises(ConfigError) as e:
        RunSettings.of(config, prefix=str(tmp_path / "store"))
    assert str(e.value) == ("environment variable MARIN_CACHE_TRUSTED_KEYS: bad value for "
                            "'MARIN_CACHE_TRUSTED_KEYS': the key named 'ci-1' is not an ed25519 public key "
                            "(3 bytes, not 32)")
    with pytest.raises(ConfigError, match=r"^override: bad value for 'cache_trusted_keys': not a public key"):
        trusted_keys(["nonsense"], "override")


def test_the_signing_key_is_a_file_relative_to_the_project_and_checked_when_used(tmp_path):
    ws = tmp_path / "ws"
    (ws / "config").mkdir(parents=True)
    (ws / "pyproject.toml").write_text('[project]\nname = "ws"\n\n[tool.uv.workspace]\nmembers = []\n')
    (ws / "config" / "marin.yaml").write_text("cache_signing_key: keys/ci.secret\n")
    config = discover_config(cwd=ws, environ={"HOME": str(tmp_path)})
    project = str((ws / "config" / "marin.yaml").resolve())
    assert config.cache_signing_key == str(ws.resolve() / "keys" / "ci.secret")
    with pytest.raises(ConfigError) as missing:
        signing_key(config.cache_signing_key, config.sources["cache_signing_key"])
    assert str(missing.value) == (f"{project}: bad value for 'cache_signing_key': "
                                  f"{ws.resolve()}/keys/ci.secret: no such file")
    key = SecretKey.generate("ci-1")
    public_file = ws / "keys" / "ci.secret"
    public_file.parent.mkdir()
    public_file.write_text(str(key.public()))
    with pytest.raises(ConfigError, match=r"'cache_signing_key': .*ci.secret: the key named 'ci-1' is a public key, "
                                          r"not a secret key"):
        signing_key(config.cache_signing_key, config.sources["cache_signing_key"])
    public_file.unlink()
    write_secret_key(str(public_file), key)
    assert signing_key(config.cache_signing_key, config.sources["cache_signing_key"]) == key
    assert signing_key(None, "default") is None
    home = discover_config(cwd=tmp_path, environ={"HOME": str(tmp_path), "MARIN_CACHE_SIGNING_KEY": "~/k"})
    assert home.cache_signing_key == os.path.expanduser("~/k")


def test_the_fingerprint_that_covers_the_records_is_pinned_and_the_old_one_still_verifies():
    # Format 2 adds the records' digests (provenance, log); a format 1 signature still checks.
    records = {"provenance.json": "1" * 64, "log.txt": None}
    covered = Fingerprint.of("s/x-cccccccccccccccc", "c" * 64, MANIFEST, SUCCESS, records)
    assert covered.message() == _fingerprint().message().replace(b"marin-cache-entry/1", b"marin-cache-entry/2")[:-1] \
        + b',"records":{"log.txt":null,"provenance.json":"' + b"1" * 64 + b'"}}'
    ci = SecretKey.generate("ci-1")
    assert refusal(_fingerprint(), sign(_fingerprint(), ci), [ci.public()]) is None
    # A format 1 signature signs no records: it is no signature of an entry's records.
    assert refusal(covered, sign(_fingerprint(), ci), [ci.public()]) == \
        "the signature by ci-1 does not match the entry: its provenance or log changed after signing"
    altered = Fingerprint.of("s/x-cccccccccccccccc", "c" * 64, MANIFEST, SUCCESS, {**records, "log.txt": "2" * 64})
    assert refusal(altered, sign(covered, ci), [ci.public()]) == \
        "the signature by ci-1 does not match the entry: its provenance or log changed after signing"
