"""GC roots: what ``marin gc`` must keep, registered in the store by every ``marin run``.

A root names outputs (``<name>-<hash16>``, as a plan names them) and says who asked for them:
the experiment files and targets, the user, the host, when. It lives under the prefix, in
``<prefix>/.marin/roots/<id>.json``, so a root registered on ``gs://`` by one machine protects its
outputs from a ``marin gc`` run on another, as a Nix GC root protects a store path.

One root per command that asks for the same thing: the id digests the targets (files named by
their path inside their workspace, so every clone of a repository gives the same id), the
user and the host. Running an edited experiment again replaces its root, so the outputs of its
old version are no longer kept alive by it; ``marin run --root NAME`` names a root explicitly (a
CI job that should hold one root whichever machine runs it).
"""

from __future__ import annotations

import getpass
import hashlib
import json
import os
import re
import socket
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

from marin.execution.store.layout import META_DIR
from marin.execution.store.record_json import RecordKey, fields_from, is_list, is_number, is_str, json_of
from rigging import filesystem as fs
from rigging.config.discovery import find_workspace_root
from rigging.versioned import read_versioned, write_if_unchanged

__all__ = ["ROOTS_DIR", "GcRoot", "UnknownRoot", "check_root_name", "read_roots", "register_root", "remove_roots",
           "root_id", "roots_folder"]

ROOTS_DIR = f"{META_DIR}/roots"
"""``<prefix>/.marin/roots/``: one JSON record per root."""

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")


class UnknownRoot(KeyError):
    """``marin roots rm`` was given an id no root of the store has."""

    def __str__(self) -> str:
        return str(self.args[0])


def check_root_name(name: str) -> str:
    """``name`` if it may name a root (letters, digits, ``. _ -``, at most 100), else ValueError."""
    if not isinstance(name, str) or not _NAME.match(name):
        raise ValueError(f"root name {name!r} must be 1-100 letters, digits, '.', '_' or '-', starting with a letter "
                         "or digit")
    return name


def roots_folder(prefix: str) -> str:
    """The folder of the roots of the store at ``prefix``."""
    return fs.join(prefix, ROOTS_DIR)


def _spelled(target: str) -> str:
    """A target as the id digests it: a file or folder by its path inside its workspace (the
    project's root, as the configuration finds it; absolute outside one), ``FILE:attr`` likewise;
    a module name as written."""
    path, colon, attr = target.partition(":") if not os.path.exists(target) else (target, "", "")
    if not os.path.exists(path):
        return target
    full = os.path.realpath(path)
    top = find_workspace_root(os.path.dirname(full))
    where = os.path.relpath(full, top) if top is not None else full
    return f"{where}{colon}{attr}"


def root_id(targets: Sequence[str], *, user: str | None = None, host: str | None = None) -> str:
    """The id of the root a ``marin run`` of ``targets`` by ``user`` on ``host`` registers."""
    body = json.dumps([user or _user(), host or socket.gethostname(), sorted(_spelled(t) for t in targets)])
    return hashlib.sha256(body.encode("utf-8")).hexdigest()[:12]


def _user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no name for this uid (a container's anonymous user)
        return str(os.getuid())


@dataclass(frozen=True)
class GcRoot:
    """A root: the outputs it keeps alive and who registered it, where and when."""

    id: str
    outputs: tuple[str, ...] = ()
    """Output names relative to the prefix (``tokenized/x-<hash16>``), sorted."""
    targets: tuple[str, ...] = ()
    """The targets as the command was given them."""
    user: str | None = None
    host: str | None = None
    cwd: str | None = None
    registered_at: float | None = None
    """When it was first registered; :attr:`updated_at` is when a run last changed what it keeps."""
    updated_at: float | None = None
    format: int = 1
    extra: dict[str, Any] = field(default_factory=dict)

    _KEYS: ClassVar[tuple[RecordKey, ...]] = (
        RecordKey("id", "id", is_str, always=True), RecordKey("outputs", "outputs", is_list, always=True),
        RecordKey("targets", "targets", is_list), RecordKey("user", "user", is_str), RecordKey("host", "host", is_str),
        RecordKey("cwd", "cwd", is_str), RecordKey("registered_at", "registered_at", is_number),
        RecordKey("updated_at", "updated_at", is_number))

    @classmethod
    def for_run(cls, targets: Sequence[str], outputs: Iterable[str], *, name: str | None = None) -> GcRoot:
        """The root a run of ``targets`` on this machine registers for ``outputs`` (``name``: its id,
        else :func:`root_id`)."""
        now = time.time()
        return cls(id=check_root_name(name) if name is not None else root_id(targets),
                   outputs=tuple(sorted(set(outputs))), targets=tuple(targets), user=_user(),
                   host=socket.gethostname(), cwd=os.getcwd(), registered_at=now, updated_at=now)

    def to_json(self) -> dict[str, Any]:
        return json_of(self, self._KEYS)  # tuples are written as JSON lists

    @classmethod
    def from_json(cls, data: Any) -> GcRoot | None:
        kwargs = fields_from(data, cls._KEYS)
        if kwargs is None or not isinstance(kwargs.get("id"), str):
            return None
        outputs = kwargs.get("outputs") or []
        targets = kwargs.get("targets") or []
        if not all(isinstance(o, str) for o in outputs) or not all(isinstance(t, str) for t in targets):
            return None
        return cls(**{**kwargs, "outputs": tuple(outputs), "targets": tuple(targets)})

    def described(self) -> str:
        """``<targets> by <user>@<host>``: who asked for it, in a few words."""
        what = " ".join(self.targets) or "(no targets)"
        return f"{what} by {self.user or '?'}@{self.host or '?'}"


def _path(prefix: str, root_id_: str) -> str:
    return fs.join(roots_folder(prefix), f"{check_root_name(root_id_)}.json")


def _same(a: GcRoot, b: GcRoot) -> bool:
    """The same root but for its times: nothing to write."""
    times = {"registered_at": None, "updated_at": None, "extra": {}}
    return replace(a, **times) == replace(b, **times)


_REGISTER_TRIES = 20


def register_root(prefix: str, root: GcRoot, *, merge: bool = False) -> str:
    """Write ``root`` under ``prefix``, replacing an earlier root of its id (whose registration time
    it keeps); an earlier root that keeps the same outputs for the same targets is left as it is,
    so a run that changes nothing writes nothing. Returns the record's path.

    ``merge``: keep the earlier root's outputs too (a run of part of its targets' graph, ``--only``,
    must not let go of the rest).

    The record is read, changed and written back only if nobody wrote it in between
    (:mod:`rigging.versioned`: a generation precondition on GCS, a checked rename locally); else it
    is read and changed again, so two runs updating one root at once both keep what they added.

    Raises:
        RuntimeError: the root kept changing under every one of many tries.
    """
    path = _path(prefix, root.id)
    for _ in range(_REGISTER_TRIES):
        seen = read_versioned(path)
        try:
            earlier = GcRoot.from_json(json.loads(seen.data)) if seen.data is not None else None
        except (ValueError, UnicodeDecodeError):
            earlier = None  # a damaged record is replaced by this run's
        wanted = root
        if merge and earlier is not None:
            wanted = replace(wanted, outputs=tuple(sorted(set(root.outputs) | set(earlier.outputs))))
        if earlier is not None and _same(earlier, wanted):
            return path
        if earlier is not None and earlier.registered_at is not None:
            wanted = replace(wanted, registered_at=earlier.registered_at)
        if write_if_unchanged(path, json.dumps(wanted.to_json(), indent=1, sort_keys=True), seen):
            return path
    raise RuntimeError(f"GC root {path} was changed by others {_REGISTER_TRIES} times while this run updated it")


def read_roots(prefix: str) -> list[GcRoot]:
    """Every readable root of the store at ``prefix``, by id. A damaged record raises: ``marin gc``
    must never read an unreadable root as one that keeps nothing."""
    folder = roots_folder(prefix)
    roots = []
    for name in fs.listdir(folder):
        if not name.endswith(".json") or name.startswith("."):
            continue  # a writer's temporary file (rigging.filesystem, rigging.versioned) or lock
        path = fs.join(folder, name)
        try:
            root = GcRoot.from_json(json.loads(fs.read_text(path)))
        except FileNotFoundError:
            continue  # removed since the listing
        except (ValueError, UnicodeDecodeError):
            root = None
        if root is None:
            raise ValueError(f"GC root {path} is unreadable: fix or remove it before collecting garbage")
        roots.append(root)
    return sorted(roots, key=lambda r: r.id)


def remove_roots(prefix: str, ids: Iterable[str]) -> list[str]:
    """Drop the roots ``ids``; every id must name a root (else :class:`UnknownRoot`, nothing removed)."""
    wanted = list(dict.fromkeys(ids))
    known = {r.id for r in read_roots(prefix)}
    missing = [i for i in wanted if i not in known]
    if missing:
        raise UnknownRoot(f"no GC root {', '.join(missing)} under {prefix} (`marin roots` lists them); nothing removed")
    for i in wanted:
        fs.delete(_path(prefix, i))
    return wanted
