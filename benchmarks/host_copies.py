"""Where a compiled step's copies between host and device memory sit in its schedule.

A TPU program's entry computation, as compiled (``compiled.as_text()``: XLA's scheduled HLO), runs
its instructions in the order written; an asynchronous copy runs from its ``copy-start`` to its
``copy-done``, and whatever is scheduled between the two runs while the bytes move. A ``while``
loop between them (the layers' forward or backward scan: most of a training step's time) is the
evidence that a transfer is hidden under compute; a copy with nothing but the optimizer's
elementwise update between its start and done is mostly waited for. ``benchmarks/tpu_compile.py
--schedule`` prints this for a step compiled for a TPU without one; the chip's profile
(``benchmarks/device_profile.py``) times the same copies.
"""

from __future__ import annotations

import re
from typing import Any

__all__ = ["HOST_SPACE", "scheduled_host_copies"]

HOST_SPACE = "S(5)"
"""How a TPU's HLO text marks a buffer in host memory (JAX's ``pinned_host``)."""

_BYTES = {"pred": 1, "s8": 1, "u8": 1, "bf16": 2, "f16": 2, "s16": 2, "f32": 4, "s32": 4, "u32": 4, "f64": 8, "s64": 8}
_INSTRUCTION = re.compile(r"\s*(?:ROOT )?%(\S+) = (.*)$")
_OPCODE = re.compile(r"[\]\})] ([a-z][\w-]*)\(")  # the opcode follows the result's shape
_ARRAY = re.compile(r"(\w+)\[([\d,]*)\](\{[^}]*\})?")


def _size(array: re.Match) -> int:
    count = 1
    for dim in filter(None, array.group(2).split(",")):
        count *= int(dim)
    return count * _BYTES.get(array.group(1), 0)


def _entry(hlo_text: str) -> list[tuple[str, str, str, str]]:
    """``(name, result shape, opcode, first operand)`` of the entry computation's instructions, in schedule order."""
    at = hlo_text.find("\nENTRY ")
    if at < 0:
        raise ValueError("no ENTRY computation in the HLO text given")
    found = []
    for line in hlo_text[at:].splitlines()[1:]:
        if line.startswith("}"):
            break
        match = _INSTRUCTION.match(line)
        opcode = _OPCODE.search(match.group(2)) if match else None
        if match and opcode:
            operand = re.match(r"%([\w.-]+)", match.group(2)[opcode.end():])
            found.append((match.group(1), match.group(2)[:opcode.start() + 1], opcode.group(1),
                          operand.group(1) if operand else ""))
    return found


def scheduled_host_copies(hlo_text: str) -> dict[str, Any]:
    """The host<->device copies of ``hlo_text``'s entry computation (a scheduled module's text).

    Returns ``{"h2d": {...}, "d2h": {...}, "loops": n}``, each direction with ``copies``, ``gib`` (bytes
    moved), ``under_loops_gib`` (bytes whose start and done have a ``while`` loop between them) and
    ``first_start``/``last_done`` (positions in the schedule, as fractions of the entry's length).

    Raises:
        ValueError: the text has no entry computation.
    """
    instructions = _entry(hlo_text)
    done_at = {operand: i for i, (_, _, opcode, operand) in enumerate(instructions) if opcode == "copy-done"}
    loops = [i for i, (_, _, opcode, _) in enumerate(instructions) if opcode == "while"]
    n = max(len(instructions), 1)
    summary: dict[str, Any] = {"loops": len(loops)}
    moved: dict[str, list[tuple[int, int, int]]] = {"h2d": [], "d2h": []}
    for i, (name, shape, opcode, _) in enumerate(instructions):
        arrays = list(_ARRAY.finditer(shape))
        if opcode != "copy-start" or len(arrays) < 2 or name not in done_at:
            continue
        # A copy-start's result is (destination, source, context).
        to_host, from_host = (HOST_SPACE in (a.group(3) or "") for a in arrays[:2])
        if to_host != from_host:
            moved["d2h" if to_host else "h2d"].append((i, done_at[name], _size(arrays[0])))
    for direction, copies in moved.items():
        hidden = sum(size for start, done, size in copies if any(start < loop < done for loop in loops))
        summary[direction] = {"copies": len(copies), "gib": round(sum(c[2] for c in copies) / 2**30, 3),
                              "under_loops_gib": round(hidden / 2**30, 3),
                              "first_start": round(min((c[0] for c in copies), default=0) / n, 3),
                              "last_done": round(max((c[1] for c in copies), default=0) / n, 3)}
    return summary
