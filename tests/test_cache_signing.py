"""Signed caches from the command line (issue 33): ``marin cache keygen``, ``marin push`` signing
with ``MARIN_CACHE_SIGNING_KEY``, ``marin plan`` saying whether fetches are checked, ``marin run``
refusing what no trusted key signed, and bad key settings as one-line errors."""

from __future__ import annotations

import base64
import json
import os
import re
import stat
from pathlib import Path

import pytest
from click.testing import CliRunner

from marin.cli.group import cli
from marin.execution.store.signing import SecretKey
from testsupport.e2e import PIPELINE_STEPS, clean_env, entry, events, marin, plan_json, write_pipeline

_PUBLIC = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._+-]*):([A-Za-z0-9+/]{43}=)$")


def _keygen(name: str, secret: Path, env: dict[str, str] | None = None) -> str:
    ran = marin("cache", "keygen", name, "--secret-file", str(secret), env=env)
    public = ran.stdout.strip()
    assert _PUBLIC.fullmatch(public) and public.startswith(f"{name}:"), ran.describe()
    return public


def test_keygen_writes_a_secret_only_its_owner_reads_and_prints_the_public_key(tmp_path: Path) -> None:
    home = tmp_path / "home"
    env = clean_env(HOME=str(home))
    ran = marin("cache", "keygen", "ci.example.org-1", env=env)
    secret = home / ".config" / "marin" / "keys" / "ci.example.org-1.secret"
    public = ran.stdout.strip()
    assert ran.stdout.count("\n") == 1 and _PUBLIC.fullmatch(public), ran.describe()
    assert f"secret key written to {secret} (mode 0600)" in ran.stderr
    assert stat.S_IMODE(secret.stat().st_mode) == 0o600
    name, _, data = secret.read_text().partition(":")
    assert name == "ci.example.org-1" and len(base64.b64decode(data, validate=True)) == 64
    # The secret's second half is the printed public key (Nix's layout), and public-key prints it again.
    assert base64.b64decode(data)[32:] == base64.b64decode(public.partition(":")[2])
    assert marin("cache", "public-key", str(secret), env=env).stdout.strip() == public

    again = marin("cache", "keygen", "ci.example.org-1", env=env, check=False)
    assert again.returncode == 2 and again.stderr.splitlines()[0] == \
        f"error: {secret} exists; a key file is never overwritten", again.describe()
    assert secret.read_text() == f"{name}:{data}"


def test_signed_pushes_are_fetched_and_everything_else_is_refused_and_built(tmp_path: Path) -> None:
    exp = write_pipeline(tmp_path / "exp")
    prefix, signed, unsigned = tmp_path / "prefix", tmp_path / "signed-cache", tmp_path / "unsigned-cache"
    ci = _keygen("ci-1", tmp_path / "keys" / "ci-1.secret")
    marin("run", str(exp), "--prefix", str(prefix))

    pushed = marin("push", str(exp), "--prefix", str(prefix), "--to", str(signed),
                   env=clean_env(MARIN_CACHE_SIGNING_KEY=str(tmp_path / "keys" / "ci-1.secret")))
    assert len(re.findall(r"^pushed pipe/\S+ \(signed by ci-1\)$", pushed.stdout, re.M)) == len(PIPELINE_STEPS), \
        pushed.describe()
    for step in PIPELINE_STEPS:
        record = json.loads((entry(signed, step) / ".marin" / "signatures.json").read_text())
        assert [s["key"] for s in record["signatures"]] == ["ci-1"]
    marin("push", str(exp), "--prefix", str(prefix), "--to", str(unsigned))
    assert not list(unsigned.rglob("signatures.json"))

    # Without trusted keys: fetched as before, and the plan says the caches are not checked.
    plain = marin("plan", str(exp), "--prefix", str(tmp_path / "a"), "--cache", str(unsigned))
    assert plain.stdout.splitlines()[-1] == (f"caches unverified: entries from {unsigned} are used without a "
                                             "signature check (no cache_trusted_keys configured; see docs/caches.md)")
    assert plan_json(str(exp), "--prefix", str(tmp_path / "a"), "--cache", str(unsigned))["caches"] == \
        {"urls": [str(unsigned)], "verified": False, "trusted_keys": []}

    trusting = clean_env(MARIN_CACHE_TRUSTED_KEYS=ci)
    checked = marin("plan", str(exp), "--prefix", str(tmp_path / "b"), "--cache", str(signed), env=trusting)
    assert checked.stdout.splitlines()[-1] == f"caches verified: an entry from {signed} is used only when signed " \
                                              "by one of ci-1", checked.describe()
    fetched = marin("run", "--require-cached", str(exp), "--prefix", str(tmp_path / "b"), "--cache", str(signed),
                    env=trusting)
    assert events(fetched.stdout, "start") == [] and "refused" not in fetched.stderr, fetched.describe()

    refused = marin("run", str(exp), "--prefix", str(tmp_path / "c"), "--cache", str(unsigned), env=trusting)
    lines = [line for line in refused.stderr.splitlines() if "refused" in line]
    other = entry(unsigned, "pipe/other").relative_to(unsigned)
    assert any(line.endswith(f"WARNING marin.execution.step_runner: cache entry {other} from {unsigned} refused: "
                             "not signed (trusted keys: ci-1); rebuilding it here") for line in lines), refused.describe()
    assert len(lines) == len(PIPELINE_STEPS), refused.describe()
    assert sorted(events(refused.stdout, "start")) == sorted(PIPELINE_STEPS), refused.describe()
    assert (entry(tmp_path / "c", "pipe/other") / "other.txt").read_text() == "hello"


def test_a_new_key_signs_what_the_cache_holds_so_the_old_one_can_go(tmp_path: Path) -> None:
    exp = write_pipeline(tmp_path / "exp")
    prefix, cache = tmp_path / "prefix", tmp_path / "cache"
    old = _keygen("ci-1", tmp_path / "ci-1.secret")
    new = _keygen("ci-2", tmp_path / "ci-2.secret")
    marin("run", str(exp), "--prefix", str(prefix))
    marin("push", str(exp), "--prefix", str(prefix), "--to", str(cache),
          env=clean_env(MARIN_CACHE_SIGNING_KEY=str(tmp_path / "ci-1.secret")))
    both = clean_env(MARIN_CACHE_TRUSTED_KEYS=f"{new},{old}")
    ran = marin("run", "--require-cached", str(exp), "--prefix", str(tmp_path / "a"), "--cache", str(cache), env=both)
    assert "refused" not in ran.stderr, ran.describe()

    resigned = marin("push", str(exp), "--prefix", str(prefix), "--to", str(cache),
                     env=clean_env(MARIN_CACHE_SIGNING_KEY=str(tmp_path / "ci-2.secret")))
    assert len(re.findall(r"^signed pipe/\S+ \(in the cache already\) by ci-2$", resigned.stdout, re.M)) == \
        len(PIPELINE_STEPS), resigned.describe()
    assert resigned.stdout.splitlines()[-1] == \
        f"pushed 0, already in cache {len(PIPELINE_STEPS)} ({len(PIPELINE_STEPS)} of them signed now by ci-2), " \
        "not finished 0"
    ran = marin("run", "--require-cached", str(exp), "--prefix", str(tmp_path / "b"), "--cache", str(cache),
                env=clean_env(MARIN_CACHE_TRUSTED_KEYS=new))
    assert "refused" not in ran.stderr and events(ran.stdout, "start") == [], ran.describe()


@pytest.mark.parametrize("setting, value, message", [
    ("MARIN_CACHE_TRUSTED_KEYS", "ci-1", "not a public key written name:base64 (as `marin cache keygen` writes keys)"),
    ("MARIN_CACHE_TRUSTED_KEYS", "ci-1:abcd", "the key named 'ci-1' is not an ed25519 public key (3 bytes, not 32)"),
    ("MARIN_CACHE_SIGNING_KEY", "{tmp}/missing.secret", "{tmp}/missing.secret: no such file"),
    ("MARIN_CACHE_SIGNING_KEY", "{tmp}/public.key", "{tmp}/public.key: the key named 'ci-1' is a public key, "
                                                    "not a secret key: sign with the file `marin cache keygen` wrote"),
])
def test_a_bad_key_setting_is_one_line_naming_it(tmp_path: Path, setting: str, value: str, message: str,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    # In this process (the setting is refused before anything is planned or started): with no other
    # MARIN_* variable set, as clean_env() gives a child.
    for name in [k for k in os.environ if k.startswith("MARIN_")]:
        monkeypatch.delenv(name)
    exp = write_pipeline(tmp_path / "exp")
    (tmp_path / "public.key").write_text(str(SecretKey.generate("ci-1").public()))
    verb = ["push", str(exp), "--to", str(tmp_path / "cache")] if "SIGNING" in setting else ["run", str(exp)]
    ran = CliRunner().invoke(cli, [*verb, "--prefix", str(tmp_path / "prefix")],
                             env={setting: value.format(tmp=tmp_path)})
    assert ran.exit_code == 2, ran.output
    assert ran.stderr.splitlines() == [
        f"error: environment variable {setting}: bad value for '{setting}': {message.format(tmp=tmp_path)}",
        "hint: fix the configuration source named above (see `marin config`)"], ran.output
    assert not (tmp_path / "prefix").exists() and not (tmp_path / "cache").exists()
