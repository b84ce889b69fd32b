"""A secret value that never prints and enters a step's identity by name only."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

__all__ = ["Secret", "SecretNotFound"]


class SecretNotFound(KeyError):
    """Raised when a secret's environment variable is not set."""


@dataclass(frozen=True)
class Secret:
    """A named secret whose value is read from the environment variable of the same name.

    Args:
        name: the secret's name and the environment variable that holds its value. The name,
            never the value, is what a step's hash and its provenance see.
    """

    name: str
    _value: str | None = field(default=None, repr=False, compare=False, hash=False)

    def __post_init__(self) -> None:
        if not self.name or not isinstance(self.name, str):
            raise ValueError(f"Secret name must be a non-empty string, got {self.name!r}")

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
