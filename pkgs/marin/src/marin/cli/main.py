"""The ``marin`` console script: the no-op record's answer first, then the Click group.

This module imports nothing at its top beyond ``sys``: a repeated, unchanged ``marin run`` is
answered from its no-op record (:mod:`marin.cli.noop`, the standard library only) before click
and the engine are imported at all. Every other command goes straight to :data:`cli`
(:mod:`marin.cli.group`).
"""

from __future__ import annotations

import sys

TYPE_CHECKING = False  # typing.TYPE_CHECKING, without importing typing (start-up time)
if TYPE_CHECKING:
    import click

__all__ = ["cli", "main"]


def main(argv: list[str] | None = None) -> None:
    """Console entry point.

    Args:
        argv: the arguments (default: ``sys.argv[1:]``). Only the console script itself (no
            ``argv``) answers from, and writes, no-op records: a caller in a process of its own
            (a test) gets the full command, its streams and audit hooks untouched.
    """
    args = sys.argv[1:] if argv is None else list(argv)
    recording = None
    if argv is None and "run" in args:
        # Here, not at the top: only `marin run` has a no-op record to answer from.
        from marin.cli import noop

        request = noop.request_of(args)
        if request is not None:
            if noop.answer(request):
                return
            from marin.cli.noop_recording import start

            recording = start(request)
    from marin.cli.group import cli as group  # click and the verbs: not needed by the answer above

    try:
        group.main(args=args, prog_name="marin")
    except SystemExit as e:
        if recording is not None:
            recording.finish(ok=e.code in (0, None))
        raise


def __getattr__(name: str) -> object:
    # `from marin.cli.main import cli` (tests, docs) still finds the group, loaded on first use.
    if name == "cli":
        from marin.cli.group import cli as group

        return group
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


if TYPE_CHECKING:
    cli: click.Group


if __name__ == "__main__":
    main()
