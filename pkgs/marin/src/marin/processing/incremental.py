"""When the plan lets a map-style data step reuse an earlier build's per-file outputs.

A step made file by file (:mod:`marin.processing.per_file`) declares it where it is defined::

    @step_function(StepTraits(plan_start=IncrementalStart(("input",))))
    def heuristics_step(config, output_path): ...

When such a step runs, the plan looks at the earlier finished builds of its name, newest first,
and picks the first that differs from it only in what it reads file by file: the same function,
version and code, and the same hashed config fields but for ``input_fields`` (and the content of
the sources it reads file by file, which the flattened config names by path, not by content; any
other source, a classifier's model file say, must have the same fingerprint). Its files folder becomes
``Start.reuse_parts``: ``marin plan`` shows "reuses the per-file outputs of ...", and the running
step copies the parts of every input file whose fingerprint is unchanged. The plan decides; the
step never searches the store itself (as for a training run's extension,
:mod:`marin.experiment.training.warm_start`).

A part is reused only when it was made by the same code on the same environment: the earlier build's
code digest (complete, both then and now) must equal the code's now, and the versions it recorded of
the distributions that code reaches (and what they require, and Python's) must be today's
(:meth:`~marin.execution.store.code_record.CodeDigest.made_otherwise`). Otherwise every file is
processed and the plan says why: ``parts rebuilt: environment changed: trafilatura 2.0.0 → 2.1.0``.

The file-by-file comparison of fingerprints, at run time, is what keeps the result identical to a
build from scratch: the plan only names a build whose parts were made by the same recipe.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from marin.execution.core.encoding import flatten_config
from marin.execution.core.identity import fn_identity
from marin.execution.core.sources import SourceKey
from marin.execution.core.step import Step
from marin.execution.core.traits import EarlierBuilds, Start
from marin.execution.core.walk import Kind, kind_of, sources_in
from marin.execution.store.layout import short_output_path
from rigging import filesystem as fs

if TYPE_CHECKING:
    from marin.execution.store.code_digest import CodeDigest
    from marin.execution.store.provenance_record import Provenance

__all__ = ["PARTS_FILE", "IncrementalStart"]

PARTS_FILE = "_parts.json"
"""The index of a step's parts, in its output folder (the leading ``_`` keeps folder readers off it):
:mod:`marin.processing.per_file` writes it; an earlier build without one was not made file by file."""


def _field(config: Any, dotted: str) -> Any:
    """The value at a dotted field path of a config (None where there is none)."""
    value = config
    for name in dotted.split("."):
        kind = kind_of(value)
        if kind is Kind.DATACLASS:
            value = getattr(value, name, None)
        elif kind is Kind.MAPPING:
            value = value.get(name)
        else:
            return None
    return value


def _recorded(prov: Provenance, digests: Mapping[SourceKey, str]) -> bool:
    """Whether an earlier build read each of these sources with the same content."""
    if not digests:
        return True
    then = {(f.spec, f.revision): f.digest for f in prov.source_fingerprints()}
    return all(then.get(key) == digest for key, digest in digests.items())


@dataclass(frozen=True)
class IncrementalStart:
    """A :data:`~marin.execution.core.traits.StartPlanner` for steps made file by file.

    Attributes:
        input_fields: the config fields the step reads file by file (dotted, as ``marin compare``
            names them): an earlier build may differ from this one in these (another source
            folder, another build of the step it reads), since each file is compared by its
            fingerprint when the step runs. Every other hashed field must be equal: a step that
            also reads a model, say, reuses nothing once the model changed.
    """

    input_fields: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if isinstance(self.input_fields, str) or not all(isinstance(f, str) and f for f in self.input_fields):
            raise TypeError(f"input_fields must be a tuple of field names, got {self.input_fields!r}")
        object.__setattr__(self, "input_fields", tuple(self.input_fields))

    def _per_file(self, key: str) -> bool:
        return any(key == f or key.startswith(f + ".") for f in self.input_fields)

    def same_recipe(self, flat: Mapping[str, str], old_flat: Mapping[str, Any]) -> bool:
        """Whether two builds' flattened configs differ at most in :attr:`input_fields`."""
        return all(self._per_file(k) for k in set(flat) | set(old_flat) if flat.get(k) != old_flat.get(k))

    def _whole_sources(self, config: Any) -> dict[SourceKey, str]:
        """The digests of the sources ``config`` reads outside :attr:`input_fields` (read whole)."""
        from marin.execution.store.sources import fingerprint_sources  # see __call__

        per_file = {s.key for f in self.input_fields for s in sources_in(_field(config, f))}
        whole = list(dict.fromkeys(s.key for s in sources_in(config) if s.key not in per_file))
        # The plan fingerprinted them a moment ago: the stat cache (or one listing) answers.
        return {key: f.digest for key, f in fingerprint_sources(whole).items()} if whole else {}

    def __call__(self, step: Step, hashes: Mapping[int, str], earlier_builds: EarlierBuilds) -> Start | None:
        # Not at import: handles import this module, and an experiment file that is only imported (or
        # planned with nothing to build) must not load fingerprinting and code digests.
        from marin.execution.store.code_digest import code_digest
        from marin.execution.store.step_record import StepRecord

        flat = flatten_config(step.config, hashes)
        fn = fn_identity(step.fn)
        own = hashes.get(id(step))
        code: CodeDigest | None = None
        whole: dict[SourceKey, str] | None = None
        for path, prov in earlier_builds(step.name):
            # The same build again (--force, a rebuild for changed code) starts from nothing.
            if prov.fn != fn or prov.version != step.version or prov.hash == own \
                    or not self.same_recipe(flat, prov.config_flat or {}):
                continue
            whole = self._whole_sources(step.config) if whole is None else whole
            if not _recorded(prov, whole):
                continue  # another model file, another eval set: another recipe
            folder = StepRecord(path).files_folder()
            if not fs.exists(fs.join(folder, PARTS_FILE)):
                return None  # not made file by file (an older layout): nothing to reuse
            code = code or code_digest(step.fn)
            built = prov.built_code()
            why = code.made_otherwise(built) if built is not None else "the build recorded no code digest"
            if why is not None:
                return Start(f"parts rebuilt: {why} (since {short_output_path(path)})")
            return Start(f"reuses the per-file outputs of {short_output_path(path)} for unchanged files",
                         reuse_parts=folder)
        return None
