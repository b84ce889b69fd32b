"""``marin cache``: the keys that sign cache entries and check them (docs/caches.md)."""

from __future__ import annotations

import os

import click


@click.group("cache")
def cache() -> None:
    """Keys that sign what `marin push` publishes and that a fetch trusts."""


def _default_secret_file(name: str) -> str:
    return os.path.join(os.path.expanduser("~"), ".config", "marin", "keys", f"{name}.secret")


@cache.command("keygen")
@click.argument("name")
@click.option("-o", "--secret-file", "path", default=None, metavar="FILE",
              help="Where to write the secret key (default: ~/.config/marin/keys/NAME.secret); never overwritten.")
def keygen(name: str, path: str | None) -> None:
    """Make the ed25519 key NAME: write its secret key to a file only you can read and print its
    public key (both NAME:BASE64, as Nix writes keys).

    Sign pushes with the secret key file (cache_signing_key, MARIN_CACHE_SIGNING_KEY); trust the
    public key where caches are read (cache_trusted_keys, MARIN_CACHE_TRUSTED_KEYS).
    """
    from marin.cli.errors import MarinError
    from marin.execution.store.signing import BadKey, SecretKey, write_secret_key

    path = path or _default_secret_file(name)
    try:
        key = SecretKey.generate(name)
    except BadKey as e:
        raise MarinError(str(e), hint="name keys after who signs and when, e.g. ci.example.org-1") from None
    try:
        write_secret_key(path, key)
    except FileExistsError:
        raise MarinError(f"{path} exists; a key file is never overwritten",
                         hint="give another file with --secret-file, or another NAME") from None
    click.echo(str(key.public()))
    click.echo(f"secret key written to {path} (mode 0600): sign pushes with it (cache_signing_key, "
               "MARIN_CACHE_SIGNING_KEY) and trust the public key above (cache_trusted_keys, "
               "MARIN_CACHE_TRUSTED_KEYS)", err=True)


@cache.command("public-key")
@click.argument("secret_file", required=False, metavar="[SECRET_FILE]")
@click.pass_context
def public_key(ctx: click.Context, secret_file: str | None) -> None:
    """Print the public key of SECRET_FILE (default: the configured cache_signing_key)."""
    from marin.cli.common import load_config
    from marin.cli.errors import MarinError
    from marin.execution.store.signing import BadKey, read_secret_key, signing_key

    if secret_file is not None:
        try:
            key = read_secret_key(secret_file)
        except BadKey as e:
            raise MarinError(str(e), hint="give the file `marin cache keygen` wrote") from None
    else:
        config = load_config(ctx)
        key = signing_key(config.cache_signing_key, config.sources.get("cache_signing_key", "default"))
        if key is None:
            raise MarinError("no SECRET_FILE given and cache_signing_key is not configured",
                             hint="give the secret key file, or set MARIN_CACHE_SIGNING_KEY")
    click.echo(str(key.public()))
