"""The step store's records under one name, for the code that imports them from here.

Each name is defined in the module of its idea, and documented there:

- :mod:`marin.execution.store.layout`: where things lie in a step's output folder (``.marin/``,
  attempt folders);
- :mod:`marin.execution.store.status_record`, :mod:`marin.execution.store.success_record`,
  :mod:`marin.execution.store.provenance_record`, :mod:`marin.execution.store.signature_record`:
  the records, as frozen dataclasses, in the JSON form of :mod:`marin.execution.store.record_json`;
- :mod:`marin.execution.store.step_record`: one step's records, their paths, reading and writing.
"""

from __future__ import annotations

from marin.execution.store.layout import ATTEMPTS_DIR, LOST_PREFIX, META_DIR, files_folder, is_reserved
from marin.execution.store.provenance_record import Dependency, Provenance, RealisedFrom
from marin.execution.store.record_json import RECORD_FORMAT
from marin.execution.store.signature_record import EntrySignatures, Signature
from marin.execution.store.status_record import BuildState, StatusRecord, StepStatus
from marin.execution.store.step_record import StepRecord
from marin.execution.store.success_record import SuccessRecord, manifest_digest

__all__ = ["ATTEMPTS_DIR", "LOST_PREFIX", "META_DIR", "RECORD_FORMAT", "BuildState", "Dependency", "EntrySignatures",
           "Provenance", "RealisedFrom", "Signature", "StatusRecord", "StepRecord", "StepStatus", "SuccessRecord",
           "files_folder", "is_reserved", "manifest_digest"]
