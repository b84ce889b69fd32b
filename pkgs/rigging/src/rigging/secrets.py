"""A secret value that never prints and enters a step's identity by name only."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

__all__ = ["Secret", "SecretNotFound"]


class SecretNotFound(KeyError):
    """Raised when a secret's environment variable is not set."""

    def __str__(self) -> str:
        # KeyError's own str() wraps the message in quotes, as if it were a key.
        return str(self.args[0]) if self.args else ""


@dataclass(frozen=True, init=False)
class Secret:
    """A named secret whose value is read from the environment variable of the same name.

    ``name`` is the only dataclass field, so whatever walks fields (hashing, provenance,
    ``dataclasses.asdict``) sees the name and never the value.

    Args:
        name: the secret's name and the environment variable that holds its value. The name,
            never the value, is what a step's hash and its provenance see.
        _value: an explicit value for this process only (tests); never pickled or printed.
    """

    name: str
    if TYPE_CHECKING:
        # Set in __init__, deliberately not a dataclass field (see above).
        _value: str | None

    def __init__(self, name: str, _value: str | None = None) -> None:
        if not name or not isinstance(name, str):
            raise ValueError(f"Secret name must be a non-empty string, got {name!r}")
        object.__setattr__(self, "name", name)
        object.__setattr__(self, "_value", _value)

    def get(self) -> str:
        """Return the secret's value (explicit value first, then the environment)."""
        if self._value is not None:
            return self._value
        try:
            return os.environ[self.name]
        except KeyError:
            raise SecretNotFound(f"secret {self.name!r} is not set: export {self.name}=...") from None

    def __repr__(self) -> str:
        return f"Secret({self.name!r})"

    __str__ = __repr__

    def __reduce__(self):
        # Pickling (to a worker process) carries the name only; the worker reads its environment.
        return (Secret, (self.name,))
