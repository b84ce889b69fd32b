"""Are the builds of two prefixes the same? Every step built in both (the same ``<name>-<hash>``
folder) is compared by the output digest its success record holds: the digest of its manifest's
files, sizes and SHA-256, less the files its step declares as differing between identical builds
(a training's metrics and timings, its checkpoints' metadata), as the store itself compares builds.

    .venv/bin/python -m benchmarks.compare_builds PREFIX_A PREFIX_B

Prints one line per step (``same`` or what differs) and a last line with the counts; exits 1 when
some step differs. Used to show that ``accelerator_process: warm`` builds what ``fresh`` builds
(``bash nix/tpu-host.sh measure nano``: the same step hashes, the same bytes, the same scores).
"""

from __future__ import annotations

import os
import sys

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


def _without_prefix(folder: str, rel: str, prefix: str) -> bytes | None:
    try:
        with open(os.path.join(folder, rel), "rb") as f:
            return f.read().replace(os.path.abspath(prefix).rstrip("/").encode(), b"<prefix>")
    except OSError:
        return None


def compare(a: str, b: str) -> tuple[list[str], int]:
    """Lines saying, for each step built under both prefixes, whether its builds are the same; and
    how many differ."""
    left, right = built_steps(a), built_steps(b)
    lines, differ = [], 0
    for name in sorted(set(left) & set(right)):
        ra, rb = StepRecord(left[name]), StepRecord(right[name])
        ma, mb = ra.read_json(ra.manifest), rb.read_json(rb.manifest)
        sa, sb = ra.read_success(), rb.read_success()
        if ma is None or mb is None or sa is None or sb is None:
            lines.append(f"{name}: unreadable records in {'the first' if ma is None or sa is None else 'the second'}")
            differ += 1
            continue
        if sa.output_digest is not None and sa.output_digest == sb.output_digest:
            lines.append(f"{name}: same ({len(ma['files'])} files)")
            continue
        files_a = {f["path"]: f["sha256"] for f in ma["files"]}
        files_b = {f["path"]: f["sha256"] for f in mb["files"]}
        changed = sorted(p for p in set(files_a) | set(files_b) if files_a.get(p) != files_b.get(p))
        # A file that names its own prefix (an evaluation's results name the model's folder) is the
        # same build when it differs by that alone.
        changed = [p for p in changed if _without_prefix(left[name], p, a) != _without_prefix(right[name], p, b)]
        if not changed:
            lines.append(f"{name}: same but for the prefix in its files ({len(ma['files'])} files)")
            continue
        differ += 1
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
