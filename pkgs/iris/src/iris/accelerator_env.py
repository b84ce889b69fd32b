"""Who may see the accelerator: every process hides it from JAX except those admitted to it.

A process that imports JAX with the accelerator visible may open it, and on a TPU host opening it
takes the chip for the life of the process. So every process that was not admitted to the
accelerator (the runner, planning, the CLI, warm workers, data steps) runs with it hidden
(:meth:`~iris.accelerator.HostAccelerator.hidden_env`: ``JAX_PLATFORMS=cpu``, and
``CUDA_VISIBLE_DEVICES=""`` on a GPU host), while a process admitted to it gets the user's own
setting back (:func:`granted_env`), narrowed to its slot.

The user's own values of the variables hidden are kept in :data:`SAVED` (JSON) beside the hidden
ones, so that a hidden process (and everything it starts) can still give them back, and can still
see the host's accelerator (:func:`users_environ`).
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator, Mapping, MutableMapping, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from iris.accelerator import HostAccelerator

__all__ = ["HIDDEN_VARIABLES", "SAVED", "accelerator_hidden", "granted_env", "hiding_env", "reveal_accelerator",
           "users_environ", "users_platforms"]

SAVED = "MARIN_ACCELERATOR_ENV"
"""The variable holding the user's own values (JSON; null: unset) of :data:`HIDDEN_VARIABLES`."""

HIDDEN_VARIABLES = ("JAX_PLATFORMS", "CUDA_VISIBLE_DEVICES")
"""The variables a hidden process has changed."""


def _users_values(environ: Mapping[str, str]) -> dict[str, str | None]:
    saved = environ.get(SAVED)
    if saved is not None:
        try:
            values = json.loads(saved)
        except ValueError:
            values = None
        if isinstance(values, dict) and all(isinstance(v, str | None) for v in values.values()):
            return {name: values.get(name) for name in HIDDEN_VARIABLES}
    return {name: environ.get(name) for name in HIDDEN_VARIABLES}


def users_environ(environ: Mapping[str, str]) -> dict[str, str]:
    """``environ`` with the hidden variables as the user set them (unset ones removed)."""
    env = dict(environ)
    env.pop(SAVED, None)
    for name, value in _users_values(environ).items():
        if value is None:
            env.pop(name, None)
        else:
            env[name] = value
    return env


def hiding_env(environ: Mapping[str, str], accelerator: HostAccelerator) -> dict[str, str]:
    """The variables to set in ``environ`` to hide ``accelerator`` (the user's values kept in :data:`SAVED`)."""
    return {SAVED: json.dumps(_users_values(environ), sort_keys=True), **accelerator.hidden_env()}


def users_platforms(environ: Mapping[str, str]) -> dict[str, str]:
    """The user's own ``JAX_PLATFORMS``, as a variable to set: empty where it was unset (JAX reads
    an empty one as unset), so that a process started from a hidden one sees what the user chose."""
    return {"JAX_PLATFORMS": _users_values(environ)["JAX_PLATFORMS"] or ""}


def granted_env(environ: Mapping[str, str], accelerator: HostAccelerator, slots: Sequence[int]) -> dict[str, str]:
    """The variables to set for a process admitted to ``slots`` of ``accelerator``: the user's own
    ``JAX_PLATFORMS`` (:func:`users_platforms`), and only its slots' devices (the whole host's
    where it holds every slot)."""
    users = _users_values(environ)
    env = users_platforms(environ)
    cuda = users["CUDA_VISIBLE_DEVICES"]
    if cuda is not None:
        env["CUDA_VISIBLE_DEVICES"] = cuda
    env.update(accelerator.slot_env(slots))
    return env


@contextlib.contextmanager
def accelerator_hidden(accelerator: HostAccelerator | None,
                       environ: MutableMapping[str, str] | None = None) -> Iterator[None]:
    """Hide ``accelerator`` in ``environ`` (default: ``os.environ``, so in this process and what it
    starts) inside the ``with`` block; then put every variable back as it was. No accelerator: nothing changes."""
    env = os.environ if environ is None else environ
    changes = hiding_env(env, accelerator) if accelerator is not None else {}
    before = {name: env.get(name) for name in changes}
    env.update(changes)
    try:
        yield
    finally:
        for name, value in before.items():
            if value is None:
                env.pop(name, None)
            else:
                env[name] = value


def reveal_accelerator(environ: MutableMapping[str, str] | None = None) -> None:
    """Give ``environ`` (default: ``os.environ``) the user's own values of the hidden variables back,
    for a process that uses the accelerator itself (``marin sample``)."""
    env = os.environ if environ is None else environ
    users = users_environ(env)
    for name in (SAVED, *HIDDEN_VARIABLES):
        if name in users:
            env[name] = users[name]
        else:
            env.pop(name, None)
