"""Are the builds of two prefixes the same? Every step built in both (the same ``<name>-<hash>``
folder) is compared by its manifest: the same files, sizes and SHA-256 (files its step declares as
differing between identical builds left out, as the store's own output digest does).

    .venv/bin/python -m benchmarks.compare_builds PREFIX_A PREFIX_B

Prints one line per step (``same`` or what differs) and a last line with the counts; exits 1 when
some step differs. Used to show that ``accelerator_process: warm`` builds what ``fresh`` builds
(``bash nix/tpu-host.sh measure nano``: the same step hashes, the same bytes, the same scores).
"""

from __future__ import annotations

import os
import sys

from marin.execution.store.manifest import output_digest
from marin.execution.store.step_record import StepRecord

__all__ = ["built_steps", "compare", "main"]


def built_steps(prefix: str) -> dict[str, str]:
    """Every finished step under ``prefix``: its folder relative to the prefix -> its folder."""
    found = {}
    for folder, dirs, _files in os.walk(prefix):
        if StepRecord(folder).is_done():
            found[os.path.relpath(folder, prefix)] = folder
            dirs[:] = []  # a step's own files are not steps
        else:
            dirs[:] = [d for d in dirs if not d.startswith(".")]
    return found


def compare(a: str, b: str) -> tuple[list[str], int]:
    """Lines saying, for each step built under both prefixes, whether its builds are the same; and
    how many differ."""
    left, right = built_steps(a), built_steps(b)
    lines, differ = [], 0
    for name in sorted(set(left) & set(right)):
        ma = StepRecord(left[name]).read_json(StepRecord(left[name]).manifest)
        mb = StepRecord(right[name]).read_json(StepRecord(right[name]).manifest)
        if ma is None or mb is None:
            lines.append(f"{name}: no manifest in {'the first' if ma is None else 'the second'}")
            differ += 1
            continue
        if output_digest(ma) == output_digest(mb):
            lines.append(f"{name}: same ({len(ma['files'])} files)")
            continue
        differ += 1
        files_a = {f["path"]: f["sha256"] for f in ma["files"]}
        files_b = {f["path"]: f["sha256"] for f in mb["files"]}
        changed = sorted(p for p in set(files_a) | set(files_b) if files_a.get(p) != files_b.get(p))
        lines.append(f"{name}: DIFFERS in {len(changed)} file(s): {', '.join(changed[:5])}")
    only = sorted(set(left) ^ set(right))
    lines.append(f"{len(set(left) & set(right))} steps built in both, {differ} differ; "
                 f"{len(only)} built in one only{': ' + ', '.join(only[:5]) if only else ''}")
    return lines, differ


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python -m benchmarks.compare_builds PREFIX_A PREFIX_B", file=sys.stderr)
        return 2
    lines, differ = compare(*argv)
    print("\n".join(lines))
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
