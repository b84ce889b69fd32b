"""Globs over ``/``-separated names, with ``glob.glob``'s rules (``recursive=True``), for local
folders and object stores alike.

``*``, ``?`` and ``[...]`` match within one name and never its leading ``.`` (hidden names match
only a pattern that spells the dot); ``**`` as a whole component matches any number of folders,
none included. A pattern is split at the folder before its first glob character: that folder is
listed (or walked) once, and the rest is matched against the names below it.
"""

from __future__ import annotations

import re

__all__ = ["Glob", "fixed_part", "has_glob", "split_glob"]

_GLOB_CHARS = "*?["


def has_glob(path: str) -> bool:
    """True when ``path`` holds a glob character (``*``, ``?`` or ``[``)."""
    return any(c in path for c in _GLOB_CHARS)


def fixed_part(path: str) -> str:
    """``path`` up to its first glob character (all of it when it has none)."""
    return path[:min((i for i in (path.find(c) for c in _GLOB_CHARS) if i >= 0), default=len(path))]


def split_glob(path: str) -> tuple[str, str]:
    """``(base folder, pattern relative to it)``: the folder before the first component with a glob
    character (``""`` for a relative pattern whose first component has one)."""
    cut = path.rfind("/", 0, len(fixed_part(path)))
    if cut < 0:
        return "", path
    return path[:cut] or "/", path[cut + 1:]


def _class_end(part: str, start: int) -> int:
    """Where the ``[...]`` opened at ``start`` closes (a ``]`` first in it is literal); -1 if never."""
    j = start + 1
    if part[j:j + 1] == "!":
        j += 1
    if part[j:j + 1] == "]":
        j += 1
    return part.find("]", j)


def _component(part: str) -> str:
    """One name's pattern as a regular expression (no ``/``)."""
    out = [] if part.startswith(".") or not has_glob(part) else [r"(?!\.)"]
    i = 0
    while i < len(part):
        c = part[i]
        if c == "*":
            out.append("[^/]*")
        elif c == "?":
            out.append("[^/]")
        elif c == "[" and (end := _class_end(part, i)) > 0:
            body = re.sub(r"([\\&~|^])", r"\\\1", part[i + 1:end])
            out.append("[" + ("^" + body[1:] if body.startswith("!") else body) + "]")
            i = end
        else:
            out.append(re.escape(c))
        i += 1
    return "".join(out)


_NAME = r"(?!\.)[^/]+"


class Glob:
    """A compiled glob, matched against names relative to its base folder.

    Args:
        pattern: the part of a glob below its base folder (:func:`split_glob`).
    """

    def __init__(self, pattern: str):
        self.pattern = pattern
        self.parts = pattern.split("/")
        self.recursive = "**" in self.parts
        pieces = []
        for i, part in enumerate(self.parts):
            last = i == len(self.parts) - 1
            if part == "**":
                pieces.append(f"(?:{_NAME}(?:/{_NAME})*)?" if last else f"(?:{_NAME}/)*")
            else:
                pieces.append(_component(part) + ("" if last else "/"))
        self._regex = re.compile("".join(pieces) + r"\Z")
        head = self.parts[:self.parts.index("**")] if self.recursive else self.parts
        self._head = [re.compile(_component(part) + r"\Z") for part in head]

    def matches(self, name: str) -> bool:
        """True when ``name`` (a file's or a folder's) matches the whole pattern."""
        return self._regex.match(name) is not None

    def may_hold(self, folder: str) -> bool:
        """Whether a match may lie below ``folder`` (one that does not match itself): whether a walk
        must enter it."""
        names = folder.split("/")
        if not self.recursive and len(names) >= len(self.parts):
            return False
        if any(name.startswith(".") for name in names[len(self._head):]):
            return False
        return all(regex.match(name) for regex, name in zip(self._head, names, strict=False))
