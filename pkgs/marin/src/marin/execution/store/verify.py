"""Re-check finished step outputs against their manifests: has anything changed since it was built?

A step's success record is a promise that its output is exactly the files of its manifest. Files
can still be edited, truncated or deleted afterwards (by hand, by a broken tool, by a bucket
lifecycle rule); ``marin verify`` finds that out before a downstream step trusts them.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from marin.execution.store.layout import META_DIR, files_folder, is_reserved
from marin.execution.store.manifest import verify_manifest
from marin.execution.store.step_record import StepRecord
from marin.execution.store.success_record import manifest_digest
from rigging import filesystem as fs

__all__ = ["StepCheck", "Verdict", "verify_output"]


class Verdict(enum.Enum):
    """The state of one step's output."""

    OK = "ok"
    CHANGED = "changed"  # built, but its files no longer match the manifest
    BROKEN = "broken"  # built, but its manifest or success record is missing or unreadable
    NOT_BUILT = "not built"  # no success record: nothing was promised, nothing to check

    @property
    def is_problem(self) -> bool:
        return self in (Verdict.CHANGED, Verdict.BROKEN)


@dataclass
class StepCheck:
    """The verdict on one output folder, with the problems found (one short line each)."""

    name: str
    output_path: str
    verdict: Verdict
    problems: list[str] = field(default_factory=list)
    files: int = 0


def verify_output(name: str, output_path: str) -> StepCheck:
    """Check one output folder: every manifest file present with its size and SHA-256, no new files.

    Args:
        name: the step's name (for the report).
        output_path: the step's output folder.
    """
    record = StepRecord(output_path)
    if not record.is_done():
        return StepCheck(name, output_path, Verdict.NOT_BUILT)
    success = record.read_success()
    manifest = record.read_json(record.manifest)
    if success is None:
        return StepCheck(name, output_path, Verdict.BROKEN, [f"{record.success}: unreadable success record"])
    if manifest is None:
        return StepCheck(name, output_path, Verdict.BROKEN,
                         [f"{record.manifest}: manifest missing or unreadable"])
    # The build's files: in the step's folder, or the attempt folder its success record names.
    folder = files_folder(output_path, success.attempt_folder)
    problems = verify_manifest(folder, manifest)
    if problems and problems[0].startswith("manifest malformed"):
        return StepCheck(name, output_path, Verdict.BROKEN, [f"{record.manifest}: {problems[0]}"])
    if success.manifest_sha256 is not None and success.manifest_sha256 != manifest_digest(manifest):
        problems.insert(0, f"{META_DIR}/manifest.json: changed after the success record was written")
    listed = {entry["path"] for entry in manifest["files"]}
    try:
        present = [rel for rel, _size in fs.walk_files(folder) if not is_reserved(rel)]
    except OSError as e:
        problems.append(f"cannot list the output: {e}")
        present = []
    problems.extend(f"{rel}: added after it was built" for rel in present if rel not in listed)
    verdict = Verdict.CHANGED if problems else Verdict.OK
    return StepCheck(name, output_path, verdict, problems, files=len(listed))

