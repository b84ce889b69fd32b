"""The placeholder text Marin's ``ArtifactStep`` puts in a config for paths known only when the
step runs: its own output folder, the prefix, a dependency's output folder. Strings, so a config
may join them with other text; :func:`marin.execution.compat.executor.run_executor_step`
replaces them in every string of the config just before the user's function runs."""

from __future__ import annotations

__all__ = ["OUTPUT_TOKEN", "PREFIX_TOKEN", "dep_token"]

OUTPUT_TOKEN = "\x00marin:output\x00"
PREFIX_TOKEN = "\x00marin:prefix\x00"
_DEP_TOKEN = "\x00marin:dep:{}\x00"


def dep_token(index: int) -> str:
    """The placeholder text of the ``index``-th dependency's output folder."""
    return _DEP_TOKEN.format(index)
