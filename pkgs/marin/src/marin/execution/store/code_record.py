"""The digest of the code a build ran, as its provenance records it (:mod:`marin.execution.store.code_digest`
makes it), and what two of them say: which functions changed, and whether a build was made by the
same code on the same environment (what lets a file-by-file step reuse its parts)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["CodeDigest"]

_FORMAT = 1


@dataclass(frozen=True)
class CodeDigest:
    """The normalised code a step function runs: its own and that of the workspace code it reaches."""

    digest: str
    """SHA-256 over ``functions`` in order (each name and its digest)."""
    functions: tuple[tuple[str, str], ...]
    """``(module:qualname, digest)``: the step function first, then what it reaches, sorted by name."""
    modules: tuple[str, ...] = ()
    """The top-level modules outside the workspace and the standard library that the code reaches
    (``trafilatura``, ``tokenizers``): their distributions are the step's environment."""
    incomplete: str | None = None
    """Why the walk did not reach everything (a bound, a name it could not follow); None: complete."""
    packages: Mapping[str, str] | None = field(default=None, compare=False)
    """The environment a build recorded (:meth:`environment` when it was made); None for a digest
    made now (asked when needed) or a build that recorded none."""

    def environment(self) -> Mapping[str, str]:
        """The versions of the distributions the code reaches and what they require, and Python's
        (:func:`marin.execution.store.environment.closure_versions`): as recorded for a build's
        digest, as installed now for one made now."""
        if self.packages is not None:
            return self.packages
        from marin.execution.store.environment import closure_versions  # not at import: read on demand

        return closure_versions(self.modules)

    def to_json(self) -> dict[str, Any]:
        """The JSON object that :meth:`from_json` reads back (with the environment as of now)."""
        return {"format": _FORMAT, "digest": self.digest, "functions": [list(pair) for pair in self.functions],
                "modules": list(self.modules), "incomplete": self.incomplete, "packages": dict(self.environment())}

    @classmethod
    def from_json(cls, data: Any) -> CodeDigest:
        """The digest :meth:`to_json` wrote; ValueError when ``data`` is not one."""
        if not isinstance(data, dict) or not isinstance(data.get("digest"), str) \
                or not isinstance(data.get("functions"), list):
            raise ValueError(f"not a code digest: {data!r:.200}")
        pairs = []
        for pair in data["functions"]:
            if not (isinstance(pair, list | tuple) and len(pair) == 2 and all(isinstance(p, str) for p in pair)):
                raise ValueError(f"not a (name, digest) pair in a code digest: {pair!r:.200}")
            pairs.append((pair[0], pair[1]))
        modules, incomplete, packages = data.get("modules", []), data.get("incomplete"), data.get("packages")
        if not (isinstance(modules, list) and all(isinstance(m, str) for m in modules)) \
                or not (incomplete is None or isinstance(incomplete, str)) \
                or not (packages is None or (isinstance(packages, dict)
                                             and all(isinstance(v, str) for v in packages.values()))):
            raise ValueError(f"not the environment of a code digest: {data!r:.200}")
        return cls(digest=data["digest"], functions=tuple(pairs), modules=tuple(modules), incomplete=incomplete,
                   packages=packages)

    def changed_since(self, built: CodeDigest) -> tuple[str, ...]:
        """Names of the functions whose code differs from ``built``'s, or that appeared or disappeared:
        the step function first, then the rest sorted; ``()`` when the code is the same."""
        if self.digest == built.digest:
            return ()
        now, then = _by_name(self.functions), _by_name(built.functions)
        changed = {name for name in now.keys() | then.keys() if now.get(name) != then.get(name)}
        first = [pair[0] for pair in (self.functions[:1] + built.functions[:1]) if pair[0] in changed]
        first = list(dict.fromkeys(first))
        return tuple(first + sorted(changed - set(first)))

    def made_otherwise(self, built: CodeDigest) -> str | None:
        """Why a build with digest ``built`` may have been made otherwise than this code would make it
        now, or None when the same code ran on the same environment: the code changed, either digest
        is incomplete (nothing can be told), the build recorded no environment, or a distribution's
        version (or Python's) differs ("environment changed: trafilatura 2.0.0 → 2.1.0")."""
        if self.incomplete is not None:
            return f"code digest incomplete: {self.incomplete}"
        if built.incomplete is not None:
            return f"the build's code digest was incomplete: {built.incomplete}"
        if self.digest != built.digest:
            return "the code changed"
        if built.packages is None:
            return "the build recorded no package versions"
        now, then = self.environment(), built.packages
        changed = [f"{name} {then.get(name, 'absent')} → {now.get(name, 'absent')}"
                   for name in sorted(now.keys() | then.keys()) if now.get(name) != then.get(name)]
        return f"environment changed: {', '.join(changed)}" if changed else None


def _by_name(functions: tuple[tuple[str, str], ...]) -> dict[str, tuple[str, ...]]:
    """Digests by name (two lambdas of one module share a name, so a name may hold several)."""
    grouped: dict[str, list[str]] = {}
    for name, digest in functions:
        grouped.setdefault(name, []).append(digest)
    return {name: tuple(sorted(digests)) for name, digests in grouped.items()}


