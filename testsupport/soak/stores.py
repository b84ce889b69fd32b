"""Where the soak builds: local folders, or buckets of a strict GCS emulator, perhaps behind a proxy that fails.

With ``--prefix gs`` the soak starts a fake-gcs-server (it enforces the store's preconditions as GCS
does). With ``--faults RATE`` its runners reach it through a :class:`testsupport.faults.FaultProxy`
that faults that share of their requests, spread over every kind (resets, 429 and 503 with and
without ``Retry-After``, stalls longer than the runners' request timeout, cut answers, 503 after a
write); the clean reference run and the soak's own looks at the store go to the emulator itself, so
that what is compared and checked is never itself faulted.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field

from testsupport.faults import FaultProxy

__all__ = ["RUNNER_STORE_TIMEOUT_S", "STALL_S", "Stores", "open_stores"]

RUNNER_STORE_TIMEOUT_S = 2.0
"""The soak's runners' ``MARIN_STORE_TIMEOUT`` under faults: an attempt with no answer for this long is
abandoned (short beside the runners' 10 s leases, as the default 20 s is beside the default minute)."""
STALL_S = 5.0
"""How long the proxy holds a stalled request: longer than the runners wait, so that they give up."""


@dataclass(frozen=True)
class Stores:
    """Where the soak builds (``soak``) and where its clean reference run builds (``clean``)."""

    soak: str
    """The prefix every round's runners share."""
    clean: str
    """The prefix of the reference run without kills (and without faults)."""
    env: dict[str, str] = field(default_factory=dict)
    """What the soak's runners need besides the soak's own environment (the store's address)."""
    clean_env: dict[str, str] = field(default_factory=dict)
    """What the clean run's runner needs (the emulator's own address, never the proxy's)."""
    proxy: FaultProxy | None = None
    """The proxy that fails the runners' requests (``--faults``)."""


@contextlib.contextmanager
def open_stores(kind: str, workdir: str, *, faults: float | None = None, seed: int = 0) -> Iterator[Stores]:
    """The soak's prefixes: ``local`` folders of ``workdir``, or ``gs`` folders of a bucket on a
    fake-gcs-server started here (and pointed at by this process while the soak runs), its runners
    behind a :class:`FaultProxy` faulting ``faults`` of their requests (seeded by ``seed``) if given."""
    if kind == "local":
        if faults is not None:
            raise ValueError("--faults needs --prefix gs (the faults are an object store's)")
        yield Stores(f"{workdir}/soak-prefix", f"{workdir}/clean-prefix")
        return
    from testsupport.faults import spread_rate
    from testsupport.gcs import emulator_env, start_fake_gcs_server, use_gcs_emulator

    emulator = start_fake_gcs_server()
    try:
        bucket = emulator.create_bucket()
        direct = emulator_env(emulator.url)
        with contextlib.ExitStack() as stack:
            proxy, env = None, direct
            if faults is not None:
                proxy = stack.enter_context(FaultProxy(emulator.url, rates=spread_rate(faults), seed=seed,
                                                       stall_s=STALL_S, retry_after_s=1))
                env = {**emulator_env(proxy.url), "MARIN_STORE_TIMEOUT": str(RUNNER_STORE_TIMEOUT_S)}
            stack.enter_context(use_gcs_emulator(emulator.url))
            yield Stores(f"{bucket}/soak-prefix", f"{bucket}/clean-prefix", env, direct, proxy)
    finally:
        emulator.stop()
