"""Discover the project's configuration from files, the environment and explicit overrides.

Sources, later wins: defaults < ``~/.config/marin/config.yaml`` < ``config/marin.yaml`` (found
by walking up from the working folder to the workspace root) < ``MARIN_*`` environment
variables < explicit overrides. :attr:`MarinConfig.sources` says where each value came from.
"""

from __future__ import annotations

import dataclasses
import enum
import os
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rigging.config.values import accelerator_value, parse_bool, positive_seconds
from rigging.config.workspace import find_workspace_root
from rigging.durations import parse_duration

__all__ = ["Backend", "ConfigError", "MarinConfig", "UnknownEnvVariable", "bad_setting", "discover_config",
           "find_workspace_root", "search_paths", "user_cache_folder"]

LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")


class UnknownEnvVariable(UserWarning):
    """A ``MARIN_*`` environment variable that this configuration does not know (ignored)."""


class ConfigError(ValueError):
    """A configuration source holds an unknown key or a bad value; the message names both."""


class Backend(enum.Enum):
    """Where steps run."""

    LOCAL = "local"
    RAY = "ray"


@dataclass(frozen=True)
class MarinConfig:
    """The resolved configuration.

    Attributes:
        prefix: where step outputs live (local folder, ``gs://bucket/path`` or ``memory://``);
            None means the default local store ``.marin/store`` in the workspace root.
        backend: where steps run: ``local`` processes or a ``ray`` cluster.
        max_parallel: how many steps may run at once; None means one per CPU.
        log_level: DEBUG, INFO, WARNING or ERROR.
        ray_address: address of a running Ray cluster (``auto``, ``host:port``); None starts one.
        caches: read-only caches (URLs of other prefixes) looked up before building a step.
        strict_env: make the environment fingerprint part of every step's hash.
        warm_workers: run local steps forked from a warm worker process that keeps its imports
            (``fray.pool``); off: a fresh interpreter per step.
        warm_worker_max_steps: steps forked from one warm worker before it is replaced by a fresh
            one (it is also replaced after a step that failed).
        lease_ttl: seconds a step's lease lives without its runner's heartbeat (renewed every
            quarter of it): how long a frozen or unreachable runner keeps its steps before another
            runner may take them over. Shorter on preemptible machines, longer on a slow store.
        code_changes: what a run does with a built step whose code changed since its build while
            its ``version`` did not: ``warn`` (keep it, say so) or ``rebuild`` it.
        cache_signing_key: the file holding the secret key (``name:base64``, as ``marin cache
            keygen`` writes it) that signs every entry pushed to a cache; None pushes unsigned.
            A relative path in a project file is relative to the project.
        cache_trusted_keys: public keys (``name:base64``); when any is set, an entry fetched from
            a cache is used only when one of them signed it. Empty: fetches are not checked.
        fast_noop: let a repeated, unchanged ``marin run`` answer from its no-op record (``stat``
            calls, without loading the experiment); off, every run plans in full.
        accelerator: this host's accelerator where detection is wrong: a single-host TPU type
            (``v5e-1``), ``gpu:<model>:<count>`` (``gpu:H100:8``) or ``none``; None (or ``auto``):
            found from the device files and environment (``iris.accelerator``).
        accelerator_slots: how many steps may use the accelerator at once, each given its share of
            the chips or GPUs (``TPU_VISIBLE_CHIPS``, ``CUDA_VISIBLE_DEVICES``); 1: one step holds all.
        accelerator_wait: seconds an accelerator step waits for an accelerator held by a process
            that is not this run's (its lock file held, or the step failed on finding it held)
            before it fails, naming the holder.
        accelerator_lock: the lock file the accelerator's runtime holds while a process uses it;
            None: libtpu's (``/tmp/libtpu_lockfile``) on a TPU host, none on a GPU host.
        accelerator_process: how local accelerator steps run: ``warm``, one after another in a
            long-lived process per accelerator slot that keeps the accelerator open
            (``fray.warm_process``), or ``fresh``, each in a new interpreter that opens it again.
        compilation_cache: the folder of JAX's persistent compilation cache for accelerator steps
            (``JAX_COMPILATION_CACHE_DIR`` where the environment sets it wins), or ``off``; None:
            ``$XDG_CACHE_HOME/marin/jax`` (``~/.cache/marin/jax``). Never part of a hash.
        store_timeout: seconds an object-store request may go without progress before it is
            abandoned and tried again (``rigging.store_requests``); None: its default (20).
        store_deadline: seconds one object-store request may take with all its retries before the
            command fails, naming it; None: its default (120).
        workspace_root: the folder holding the workspace's ``pyproject.toml`` (not configurable).
        sources: for each field, where its value came from.
    """

    prefix: str | None = None
    backend: Backend = Backend.LOCAL
    max_parallel: int | None = None
    log_level: str = "INFO"
    ray_address: str | None = None
    caches: tuple[str, ...] = ()
    strict_env: bool = False
    warm_workers: bool = True
    warm_worker_max_steps: int = 200
    lease_ttl: float = 60.0
    code_changes: str = "warn"
    cache_signing_key: str | None = None
    cache_trusted_keys: tuple[str, ...] = ()
    fast_noop: bool = True
    accelerator: str | None = None
    accelerator_slots: int = 1
    accelerator_wait: float = 300.0
    accelerator_lock: str | None = None
    accelerator_process: str = "warm"
    compilation_cache: str | None = None
    store_timeout: float | None = None
    store_deadline: float | None = None
    workspace_root: str | None = field(default=None, compare=False)
    sources: Mapping[str, str] = field(default_factory=dict, compare=False, repr=False)

    def resolved_prefix(self) -> str:
        """The prefix to use: the configured one, else ``<workspace>/.marin/store``."""
        if self.prefix:
            return self.prefix
        root = self.workspace_root or os.getcwd()
        return os.path.join(root, ".marin", "store")

    def describe(self) -> list[tuple[str, Any, str]]:
        """Rows of (key, value, source) for display."""
        rows = []
        for f in _SETTABLE:
            value = getattr(self, f)
            if isinstance(value, enum.Enum):
                value = value.value
            rows.append((f, value, self.sources.get(f, "default")))
        return rows


_SETTABLE = ("prefix", "backend", "max_parallel", "log_level", "ray_address", "caches", "strict_env",
             "warm_workers", "warm_worker_max_steps", "lease_ttl", "code_changes", "cache_signing_key",
             "cache_trusted_keys", "fast_noop", "accelerator", "accelerator_slots", "accelerator_wait",
             "accelerator_lock", "accelerator_process", "compilation_cache", "store_timeout", "store_deadline")

CODE_CHANGES = ("warn", "rebuild")
"""The values of ``code_changes``."""

ACCELERATOR_PROCESSES = ("warm", "fresh")
"""The values of ``accelerator_process``."""


def _coerce(key: str, value: Any) -> Any:
    """Turn a raw value from a file or variable into the field's type; ValueError if it can't."""
    if key == "accelerator":
        return None if value is None else accelerator_value(value)
    if key == "accelerator_wait":
        return parse_duration(value)
    if key in ("prefix", "ray_address", "cache_signing_key", "accelerator_lock", "compilation_cache"):
        if value is None:
            return None
        if not isinstance(value, str) or not value.strip():
            raise ValueError(f"expected a non-empty string, got {value!r}")
        paths = ("cache_signing_key", "accelerator_lock", "compilation_cache")
        return os.path.expanduser(value.strip()) if key in paths else value.strip()
    if key == "backend":
        try:
            return value if isinstance(value, Backend) else Backend(str(value).strip().lower())
        except ValueError:
            raise ValueError(
                f"expected one of {', '.join(b.value for b in Backend)}, got {value!r}"
            ) from None
    if key in ("max_parallel", "warm_worker_max_steps", "accelerator_slots"):
        if value is None and key == "max_parallel":
            return None
        if isinstance(value, bool) or value is None:
            raise ValueError(f"expected a positive integer, got {value!r}")
        try:
            n = int(str(value).strip()) if not isinstance(value, int) else value
        except ValueError:
            raise ValueError(f"expected a positive integer, got {value!r}") from None
        if n < 1:
            raise ValueError(f"expected a positive integer, got {value!r}")
        return n
    if key == "log_level":
        level = str(value).strip().upper()
        if level not in LOG_LEVELS:
            raise ValueError(f"expected one of {', '.join(LOG_LEVELS)}, got {value!r}")
        return level
    if key in ("caches", "cache_trusted_keys"):
        # Public keys are checked where they are used (marin.execution.store.signing): only there is
        # the key format known.
        what = "URLs" if key == "caches" else "public keys"
        if isinstance(value, str):
            items = [v for v in (s.strip() for s in value.split(",")) if v]
        elif isinstance(value, list | tuple):
            items = list(value)
        else:
            raise ValueError(f"expected a list of {what}, got {value!r}")
        if not all(isinstance(v, str) and v.strip() for v in items):
            raise ValueError(f"expected a list of {what}, got {value!r}")
        return tuple(v.strip() for v in items)
    if key in ("strict_env", "warm_workers", "fast_noop"):
        return parse_bool(value)
    if key == "lease_ttl":
        return positive_seconds(value)
    if key in ("store_timeout", "store_deadline"):
        return None if value is None else positive_seconds(value)
    if key in ("code_changes", "accelerator_process"):
        words = CODE_CHANGES if key == "code_changes" else ACCELERATOR_PROCESSES
        word = str(value).strip().lower() if isinstance(value, str) else value
        if word not in words:
            raise ValueError(f"expected one of {', '.join(words)}, got {value!r}")
        return word
    raise KeyError(key)


def _setting_name(key: str, where: str) -> str:
    """How ``where`` spells the setting ``key``: ``MARIN_<KEY>`` in the environment, else the key."""
    return f"MARIN_{key.upper()}" if where.startswith(_ENV_SOURCE) else key


def bad_setting(key: str, where: str, why: str) -> ConfigError:
    """The error for a bad value of the setting ``key`` from the source ``where`` (a file, a
    variable, ``override``: :attr:`MarinConfig.sources`), worded as discovery words its own, for
    values that are checked where they are used."""
    return ConfigError(f"{where}: bad value for {_setting_name(key, where)!r}: {why}")


def user_cache_folder(environ: Mapping[str, str] | None = None) -> str:
    """The user's cache folder for this project: ``$XDG_CACHE_HOME/marin``, else ``~/.cache/marin``
    (the stat cache, the no-op records and JAX's compiled programs live under it)."""
    env = os.environ if environ is None else environ
    return os.path.join(env.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "marin")


def _find_project_file(start: Path, root: Path | None) -> Path | None:
    for folder in (start, *start.parents):
        candidate = folder / "config" / "marin.yaml"
        if candidate.is_file():
            return candidate
        if root is not None and folder == root:
            break
    return None


def _user_file(environ: Mapping[str, str]) -> Path:
    return Path(environ.get("HOME", "~")).expanduser() / ".config/marin/config.yaml"


def search_paths(cwd: str | os.PathLike | None = None, environ: Mapping[str, str] | None = None) -> list[str]:
    """Every file whose presence or content can change what :func:`discover_config` (and
    :func:`find_workspace_root`) find from ``cwd``: the user file, then ``pyproject.toml`` and
    ``config/marin.yaml`` in ``cwd`` and in every folder above it. For a caller that watches the
    configuration by ``stat`` (``marin run``'s no-op record); each may or may not exist."""
    start = Path(cwd or os.getcwd()).resolve()
    found = [str(_user_file(os.environ if environ is None else environ))]
    for folder in (start, *start.parents):
        found += [str(folder / "pyproject.toml"), str(folder / "config" / "marin.yaml")]
    return found


def _read_yaml(path: Path) -> dict[str, Any]:
    import yaml  # deferred: most runs have no config file to parse

    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: not valid YAML ({str(e).splitlines()[0]})") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping of keys to values, got {type(data).__name__}")
    return data


def discover_config(
    overrides: Mapping[str, Any] | None = None,
    *,
    cwd: str | os.PathLike | None = None,
    environ: Mapping[str, str] | None = None,
    user_config: str | os.PathLike | None = None,
) -> MarinConfig:
    """Build the configuration from every source, later sources winning.

    Args:
        overrides: explicit values (e.g. from command-line options); None values are ignored.
        cwd: folder to start the search for ``config/marin.yaml`` (default: working folder).
        environ: environment to read ``MARIN_*`` variables from (default: ``os.environ``).
        user_config: path of the user file (default: ``~/.config/marin/config.yaml``).

    Raises:
        ConfigError: a source has an unknown key or a bad value; the message names the source
            (file or variable) and the key.
    """
    env = os.environ if environ is None else environ
    start = Path(cwd or os.getcwd()).resolve()
    root = find_workspace_root(start)
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}

    def apply(data: Mapping[str, Any], where: str) -> None:
        for key, raw in data.items():
            if key not in _SETTABLE:
                known = ", ".join(_setting_name(k, where) for k in _SETTABLE)
                raise ConfigError(f"{where}: unknown key {_setting_name(key, where)!r} (known: {known})")
            try:
                values[key] = _coerce(key, raw)
            except ValueError as e:
                raise bad_setting(key, where, str(e)) from None
            sources[key] = where

    user_path = Path(user_config) if user_config else _user_file(env)
    if user_path.is_file():
        apply(_read_yaml(user_path), str(user_path))
    project_path = _find_project_file(start, root)
    if project_path is not None:
        data = _read_yaml(project_path)
        # A relative prefix or key file in a project file is relative to the project, not the
        # working folder. A blank one is left alone so that validation rejects it instead of it
        # becoming the project.
        for key in ("prefix", "cache_signing_key"):
            path = data.get(key)
            if isinstance(path, str) and path.strip() and "://" not in path and not os.path.isabs(path) \
                    and not (key == "cache_signing_key" and path.startswith("~")):
                data = {**data, key: str(project_path.parent.parent / path.strip())}
        apply(data, str(project_path))
    env_values = {}
    for name in [n for n in env if n.startswith("MARIN_")]:  # the names first: reading every value is slow
        raw = env[name]
        key = name[len("MARIN_"):].lower()
        if key not in _SETTABLE:
            # Other tools (Marin's own scripts and CI: MARIN_ROOT, MARIN_CI_S3_PREFIX ...) set
            # MARIN_* variables too: say that this config ignores them, never fail on them.
            if key not in _RESERVED_ENV:
                warnings.warn(
                    f"environment variable {name} is not a marin-build setting and is ignored "
                    f"(known: {', '.join('MARIN_' + k.upper() for k in _SETTABLE)})", UnknownEnvVariable, stacklevel=2)
            continue
        env_values[key] = raw
    for key, raw in sorted(env_values.items()):
        apply({key: raw}, f"{_ENV_SOURCE}MARIN_{key.upper()}")
    if overrides:
        apply({k: v for k, v in overrides.items() if v is not None and v != ()}, "override")
    return MarinConfig(**values, workspace_root=str(root) if root else None, sources=dict(sources))


_ENV_SOURCE = "environment variable "
"""How :attr:`MarinConfig.sources` begins the name of an environment variable."""

# Variables with the MARIN_ prefix that belong to the runner's own plumbing, not to the config.
_RESERVED_ENV = frozenset({"step_attempt", "worker", "soak_seed", "test_gcs", "stat_cache", "no_fast_noop",
                           "accelerator_env"})


def replace(config: MarinConfig, **changes: Any) -> MarinConfig:
    """Return ``config`` with ``changes`` applied and recorded as overrides."""
    sources = dict(config.sources)
    coerced = {}
    for key, value in changes.items():
        coerced[key] = _coerce(key, value)
        sources[key] = "override"
    return dataclasses.replace(config, **coerced, sources=sources)
