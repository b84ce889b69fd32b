"""A run's settings: one frozen object, made once from the configuration and the caller's keywords.

The runner, its scheduling loop, its backends and every attempt read this one object; none of
them copies its fields.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from marin.execution.store.signing import PublicKey, trusted_keys
from rigging.config.discovery import (
    ACCELERATOR_PROCESSES,
    CODE_CHANGES,
    Backend,
    MarinConfig,
    discover_config,
    replace,
)

__all__ = ["RunSettings"]

# The settings the configuration (``rigging.config.discovery.MarinConfig``) also holds: a keyword
# of one of these names overrides the configured value (and is recorded as an override).
_CONFIGURED = ("prefix", "max_parallel", "strict_env", "caches", "backend", "ray_address", "warm_workers",
               "lease_ttl", "code_changes", "cache_signing_key", "cache_trusted_keys", "accelerator",
               "accelerator_slots", "accelerator_wait", "accelerator_lock", "accelerator_process", "compilation_cache")


@dataclass(frozen=True)
class RunSettings:
    """How one runner runs: where outputs live, where steps run, what to build and how carefully.

    Made by :meth:`of` (the configuration, then keywords); handed as is to the scheduling loop,
    the backends and every attempt.
    """

    prefix: str
    """Where outputs live (a local folder, ``gs://bucket/path``, ``memory://...``), resolved."""
    backend: Backend = Backend.LOCAL
    """Where steps run: processes on this machine, or tasks on a Ray cluster."""
    ray_address: str | None = None
    """The Ray cluster (``host:port`` or ``auto``); None starts a private local one."""
    max_parallel: int = 1
    """How many steps may run at once."""
    caches: tuple[str, ...] = ()
    """Read-only caches (other prefixes) to fetch finished steps from before building."""
    cache_trusted_keys: tuple[PublicKey, ...] = ()
    """Public keys of which one must have signed a cache entry for it to be fetched (or reused);
    empty: entries are not checked (``marin.execution.store.signing``). Given as ``name:base64``
    strings, they are parsed."""
    cache_signing_key: str | None = None
    """The secret key file that signs what is pushed to a cache (``marin push``); None: unsigned."""
    strict_env: bool = False
    """Make the environment fingerprint part of every hash."""
    lease_ttl: float = 60.0
    """Seconds a step's lease lives without a heartbeat before another runner may take over."""
    warm_workers: bool = True
    """Run local steps forked from a warm worker (``fray.pool``) rather than a fresh interpreter each."""
    warm_worker_max_steps: int = 200
    """Steps forked from one warm worker before it is replaced."""
    force: tuple[str, ...] = ()
    """Glob patterns of step names to rebuild even when cached."""
    only: tuple[str, ...] = ()
    """Glob patterns: build only matching steps and their dependencies."""
    dry_run: bool = False
    """Plan only; run nothing."""
    require_cached: bool = False
    """Refuse to build anything (``NotCached`` naming the steps)."""
    poll_interval: float = 0.1
    """Seconds between checks of running and awaited steps."""
    budget_s: float | None = None
    """Refuse a plan whose estimated wall time exceeds this many seconds."""
    budget_accelerator_hours: float | None = None
    """Refuse a plan estimated to use more accelerator-hours (all types)."""
    early_cutoff: bool = True
    """Reuse an earlier build of a step whose inputs were rebuilt with identical output."""
    code_changes: str = "warn"
    """A built step whose code changed since its build (its ``version`` did not): ``warn`` keeps
    it and says so, ``rebuild`` builds it again."""
    accelerator: str | None = None
    """This host's accelerator as the configuration states it (``v5e-1``, ``gpu:H100:8``, ``none``);
    None: found on the host (``iris.accelerator.detect_accelerator``)."""
    accelerator_slots: int = 1
    """How many steps may use the host's accelerator at once (each given its share of it)."""
    accelerator_wait: float = 300.0
    """Seconds an accelerator step waits for an accelerator another process holds before it fails."""
    accelerator_lock: str | None = None
    """The lock file the accelerator's runtime holds (None: libtpu's on a TPU host)."""
    accelerator_process: str = "warm"
    """``warm``: local accelerator steps run one after another in a long-lived process per
    accelerator slot, which keeps the accelerator open (:mod:`marin.execution.run.warm_accelerator`);
    ``fresh``: each in an interpreter of its own."""
    compilation_cache: str | None = None
    """JAX's persistent compilation cache for accelerator steps: a folder, ``off``, or None for the
    user's cache folder (:func:`marin.execution.run.warm_accelerator.compilation_cache_env`)."""
    sources: Mapping[str, str] = field(default_factory=dict, compare=False, repr=False)
    """For each configured setting, where its value came from (a file, a variable, ``override``)."""

    def __post_init__(self) -> None:
        if not isinstance(self.prefix, str) or not self.prefix:
            raise ValueError(f"prefix must be a non-empty string, got {self.prefix!r}")
        if not isinstance(self.backend, Backend):
            raise TypeError(f"backend must be a rigging Backend, got {self.backend!r}")
        if isinstance(self.max_parallel, bool) or not isinstance(self.max_parallel, int) or self.max_parallel < 1:
            raise ValueError(f"max_parallel must be >= 1, got {self.max_parallel}")
        if not self.lease_ttl > 0:
            raise ValueError(f"lease_ttl must be a positive number of seconds, got {self.lease_ttl}")
        if not self.poll_interval > 0:
            raise ValueError(f"poll_interval must be a positive number of seconds, got {self.poll_interval}")
        if isinstance(self.accelerator_slots, bool) or not isinstance(self.accelerator_slots, int) \
                or self.accelerator_slots < 1:
            raise ValueError(f"accelerator_slots must be an integer >= 1, got {self.accelerator_slots!r}")
        if not self.accelerator_wait > 0:
            raise ValueError(f"accelerator_wait must be a positive number of seconds, got {self.accelerator_wait}")
        if self.warm_worker_max_steps < 1:
            raise ValueError(f"warm_worker_max_steps must be >= 1, got {self.warm_worker_max_steps}")
        if self.accelerator_process not in ACCELERATOR_PROCESSES:
            raise ValueError(f"accelerator_process must be one of {', '.join(ACCELERATOR_PROCESSES)}, "
                             f"got {self.accelerator_process!r}")
        if self.code_changes not in CODE_CHANGES:
            raise ValueError(f"code_changes must be one of {', '.join(CODE_CHANGES)}, got {self.code_changes!r}")
        for name in ("budget_s", "budget_accelerator_hours"):
            value = getattr(self, name)
            if value is not None and not value > 0:
                raise ValueError(f"{name} must be positive, got {value}")
        for name in ("caches", "force", "only", "cache_trusted_keys"):
            value = getattr(self, name)
            if isinstance(value, str):
                raise TypeError(f"{name} must be a sequence of strings, got the string {value!r}")
            object.__setattr__(self, name, tuple(value))
        object.__setattr__(self, "cache_trusted_keys",
                           trusted_keys(self.cache_trusted_keys, self.sources.get("cache_trusted_keys", "override")))

    @classmethod
    def of(cls, config: MarinConfig | None = None, **keywords: Any) -> RunSettings:
        """The settings from ``config`` (default: discovered, ``rigging.config.discovery.discover_config``),
        each keyword that is not None overriding one setting.

        Keywords named like a configuration field (``prefix``, ``max_parallel``, ``strict_env``,
        ``caches``, ``backend``, ``ray_address``, ``warm_workers``, ``lease_ttl``,
        ``cache_trusted_keys``, ``cache_signing_key``, ``accelerator``, ``accelerator_slots``,
        ``accelerator_wait``, ``accelerator_lock``, ``accelerator_process``, ``compilation_cache``) override it and are recorded as overrides
        (:attr:`sources`); the others are the run's own.

        Raises:
            TypeError: ``config`` is not a ``MarinConfig``, or a keyword names no setting.
            ValueError: a bad value, named (``rigging.config.discovery.ConfigError`` for a trusted
                key that is not a public key, naming the setting and where it came from).
        """
        if config is not None and not isinstance(config, MarinConfig):
            raise TypeError(f"config must be a rigging MarinConfig, got {type(config).__name__} "
                            "(pass the prefix as prefix=...)")
        unknown = sorted(set(keywords) - {f.name for f in dataclasses.fields(cls) if f.name != "sources"})
        if unknown:
            raise TypeError(f"unknown run settings: {', '.join(unknown)}")
        keywords = {k: v for k, v in keywords.items() if v is not None}
        # Validated here too, before the configuration's own coercion words it differently.
        if "max_parallel" in keywords and not (isinstance(keywords["max_parallel"], int) and keywords["max_parallel"] >= 1):
            raise ValueError(f"max_parallel must be >= 1, got {keywords['max_parallel']}")
        if "lease_ttl" in keywords and not keywords["lease_ttl"] > 0:
            raise ValueError(f"lease_ttl must be a positive number of seconds, got {keywords['lease_ttl']}")
        overrides = {k: keywords.pop(k) for k in _CONFIGURED if k in keywords}
        if "caches" in overrides:
            overrides["caches"] = tuple(overrides["caches"])
        keys = overrides.get("cache_trusted_keys")
        if keys is not None and not isinstance(keys, str):
            overrides["cache_trusted_keys"] = tuple(str(k) for k in keys)  # a PublicKey as its text
        if config is None:
            config = discover_config()
        if overrides:
            config = replace(config, **overrides)
        return cls(
            prefix=config.resolved_prefix(),
            backend=config.backend,
            ray_address=config.ray_address,
            max_parallel=config.max_parallel or (os.cpu_count() or 1),
            caches=config.caches,
            cache_trusted_keys=trusted_keys(config.cache_trusted_keys,
                                            config.sources.get("cache_trusted_keys", "default")),
            cache_signing_key=config.cache_signing_key,
            strict_env=config.strict_env,
            lease_ttl=config.lease_ttl,
            code_changes=config.code_changes,
            warm_workers=config.warm_workers,
            warm_worker_max_steps=config.warm_worker_max_steps,
            accelerator=config.accelerator,
            accelerator_slots=config.accelerator_slots,
            accelerator_wait=config.accelerator_wait,
            accelerator_lock=config.accelerator_lock,
            accelerator_process=config.accelerator_process,
            compilation_cache=config.compilation_cache,
            sources=dict(config.sources),
            **keywords,
        )

    @property
    def places(self) -> tuple[str, ...]:
        """Where builds of a step may be found: this prefix, then the caches."""
        return (self.prefix, *self.caches)
