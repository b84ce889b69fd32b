"""What a no-op ``marin run`` depends on beyond what it was seen to read, offered to its
recording (:mod:`marin.cli.noop_recording`) once it has printed its answer.

A run leaves a no-op record only when its answer can be checked by ``stat``: every step cached
or unneeded, a local store, plain settings (no ``--force``, caches, ``--strict-env``,
``code_changes: rebuild``, Ray), every source local, no step named twice, no debug logging,
``fast_noop`` on, nothing it read modified within the stat cache's racy window (a file
changed twice within one tick of the file system's clock could ``stat`` the same), and nothing the
experiment's code did that no ``stat`` can check (:func:`marin.cli.noop_recording.refusal`).
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Iterable, Sequence
from stat import S_ISREG
from typing import TYPE_CHECKING, Any

from marin.cli.noop import DIGESTED_SIZE, content_digest, error_answer, stat_key
from marin.cli.noop_calls import USER, code_kind_of_file
from marin.cli.noop_recording import current, refusal
from marin.execution.core.step import DEV_VERSION
from marin.execution.core.traits import traits_of
from marin.execution.plan.model import Action, Plan
from marin.execution.run.outcome import Outcome, RunResult
from marin.execution.run.settings import RunSettings
from marin.execution.store import done_index
from marin.execution.store.layout import META_DIR
from marin.execution.store.roots import root_id, roots_folder
from marin.execution.store.stat_cache import trusted
from marin.execution.store.step_record import StepRecord
from marin.report.run_report import REPORTS_DIR
from rigging import filesystem as fs
from rigging.config.discovery import Backend, MarinConfig, search_paths

if TYPE_CHECKING:
    from marin.cli.noop_recording import Recording

__all__ = ["offer_noop_record"]

logger = logging.getLogger(__name__)


class _NoRecord(Exception):
    """Why this run's answer cannot be checked by ``stat`` next time."""


def offer_noop_record(result: RunResult, settings: RunSettings, config: MarinConfig | None,
                      targets: Sequence[str], report: str) -> None:
    """Offer this run's no-op record, if the command is recording and the run can leave one.

    Args:
        result: the run.
        settings: its settings.
        config: the configuration it was made from (``fast_noop``).
        targets: the command's targets (the folders whose configuration files count).
        report: the report it printed the path of.
    """
    recording = current()
    if recording is None:
        if refusal() is not None:
            logger.debug("no no-op record for this run: %s", refusal())
        return
    recording.stop_watching()  # what the run asked is known; the questions below are the record's own
    try:
        plan = _answerable(result, settings, config)
        paths, checks, markers, digests = _depends(plan, settings.prefix, targets, report, recording)
    except (_NoRecord, OSError) as e:  # OSError: a file or folder vanished meanwhile; the run itself went well
        logger.debug("no no-op record for this run: %s", e)
        recording.abandon()
        return
    recording.offer(paths, checks, fs.strip_protocol(done_index.index_folder(_local(settings.prefix))), markers,
                    digests)


def _answerable(result: RunResult, settings: RunSettings, config: MarinConfig | None) -> Plan:
    """The run's plan, when a record of it could answer the same command again."""
    plan = result.plan
    if plan is None or not result.ok or any(s.outcome not in (Outcome.CACHED, Outcome.UNNEEDED) for s in result.steps):
        raise _NoRecord("it built or fetched something")
    if config is not None and not config.fast_noop:
        raise _NoRecord("fast_noop is off in the configuration")
    if (settings.dry_run or settings.force or settings.caches or settings.strict_env or settings.code_changes != "warn"
            or settings.backend is not Backend.LOCAL):
        raise _NoRecord("its settings (--force, caches, --strict-env, code_changes rebuild or Ray) decide more than files")
    if not fs.is_local(settings.prefix):
        raise _NoRecord(f"the store {settings.prefix} is not local")
    if plan.name_clashes:
        raise _NoRecord("steps share a name (the warning is the run's to print)")
    if any(p.step.version == DEV_VERSION for p in plan.steps):
        raise _NoRecord('a step of version "dev" rebuilds on every run')
    if any(f.kind != "local" for p in plan.steps for f in p.sources):
        raise _NoRecord("a source is not a local file (an object store or the Hub is not asked by stat)")
    for p in plan.steps:
        expander = traits_of(p.step.fn).expand
        if expander is not None and _experiments_own(expander):
            raise _NoRecord(f"{p.name}'s expander is the experiment's own code, run after it was imported")
    if logging.getLogger().isEnabledFor(logging.DEBUG):
        raise _NoRecord("debug logs are on")
    return plan


def _experiments_own(fn: Any) -> bool:
    """Whether ``fn`` is the experiment's own code (:mod:`marin.cli.noop_calls`), or cannot be told."""
    file = getattr(getattr(fn, "__code__", None), "co_filename", None)
    return not isinstance(file, str) or not file.startswith(os.sep) or code_kind_of_file(file) == USER


def _local(prefix: str) -> str:
    return os.path.abspath(fs.strip_protocol(prefix))


def _stat(path: str) -> os.stat_result | int | None:
    try:
        return os.stat(path)
    except OSError as e:
        return error_answer(e)


def _looked_for(plan: Plan, targets: Sequence[str]) -> Iterable[str]:
    """Paths the answer depends on that a run need not open or list: every imported module's
    file, every ``sys.path`` entry, the configuration's files (found from the working folder and
    from each target's), and every file of a local source."""
    for module in list(sys.modules.values()):
        path = getattr(module, "__file__", None)
        if isinstance(path, str):
            yield os.path.abspath(path)
    for entry in sys.path:
        yield os.path.abspath(entry or ".")
    yield from search_paths()
    for target in targets:
        spec = target if os.path.exists(target) else target.rpartition(":")[0] or target
        if os.path.exists(spec):
            yield from search_paths(spec if os.path.isdir(spec) else os.path.dirname(os.path.abspath(spec)))
    specs = sorted({f.spec for p in plan.steps for f in p.sources})
    if specs:
        # Here: a graph that reads no source never loads fingerprinting (sqlite3 and the rest).
        from marin.execution.store.sources import local_source_files

        for spec in specs:
            yield from local_source_files(spec)


def _store_own(plan: Plan, store: str) -> tuple[str, ...]:
    """The folders under the store that are its own (bookkeeping, reports) or this plan's outputs,
    each with a trailing separator, as written and as resolved: what a run reads there is covered by
    each step's success record and the done index. Anything else under the prefix (``--prefix .``:
    the experiment itself, a data file, a source) is an input like any other."""
    bases = dict.fromkeys((store, os.path.realpath(store)))
    own = [META_DIR, REPORTS_DIR]
    own += [os.path.relpath(_local(p.output_path), store) for p in plan.steps]
    return tuple(dict.fromkeys(os.path.join(base, rel).rstrip(os.sep) + os.sep for base in bases for rel in own))


def _depends(plan: Plan, prefix: str, targets: Sequence[str], report: str, recording: Recording,
             ) -> tuple[dict[str, Any], dict[tuple[str, str, object], object], list[str], dict[str, str]]:
    """(every path to ``stat`` with its ``stat`` or None, every other question asked outside the
    store's own folders with its answer, the done markers that must stay, the small files read with
    their content's digest)."""
    store = _local(prefix)
    own = _store_own(plan, store)

    def outside(path: str) -> bool:
        if "/.." in path:  # recorded as asked: what it names, the kernel decides
            path = os.path.realpath(path)
        return not (path + os.sep).startswith(own)

    paths: dict[str, Any] = {path: st for path, st in recording.seen.items() if outside(path)}
    checks = {question: answer for question, answer in recording.checks.items() if outside(question[1])}
    for path in _looked_for(plan, targets):
        if path not in paths and outside(path):
            paths[path] = _stat(path)
    for path, st in (*paths.items(), *((question[1], answer) for question, answer in checks.items())):
        if isinstance(st, os.stat_result) and not trusted((st,), recording.started_ns):
            raise _NoRecord(f"{path}, which it read, was modified moments before it was read")
    digests = _digests(paths, recording.read)
    # The store's own files are replaced whole, never edited in place: their stat is enough.
    index = done_index.read_index(store)
    markers = []
    for p in plan.steps:
        success = _local(StepRecord(p.output_path).success)
        st = _stat(success)
        if p.action is Action.CACHED:
            if not isinstance(st, os.stat_result) or p.output_name not in index:
                raise _NoRecord(f"{p.output_name} is not in the done index yet")
            markers.append(done_index.marker_name(p.output_name, *done_index.split_stamp(index[p.output_name])))
        elif st is not None:
            raise _NoRecord(f"{p.output_name} was built meanwhile")
        paths[success] = st
    paths[_local(report)] = _stat(_local(report))
    # The run's GC root: dropped (`marin roots rm`) or replaced since, the run registers it again in full.
    root = _local(fs.join(roots_folder(prefix), f"{root_id(targets)}.json"))
    paths[root] = _stat(root)
    return paths, checks, markers, digests


_ENVIRONMENT = tuple(dict.fromkeys(os.path.realpath(p).rstrip(os.sep) + os.sep
                                   for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)))
"""The Python environment's own folders (the standard library, installed packages): replaced by
installers (a new inode and change time), so their files are kept by ``stat`` alone."""


def _digests(paths: dict[str, Any], read: set[str]) -> dict[str, str]:
    """The content digest of each small regular file the command read (:data:`marin.cli.noop.DIGESTED_SIZE`)
    outside the Python environment, once its ``stat`` shows it unchanged since it was read."""
    digests = {}
    for path in sorted(read):
        st = paths.get(path)
        if (not isinstance(st, os.stat_result) or st.st_size > DIGESTED_SIZE or not S_ISREG(st.st_mode)
                or path.startswith(_ENVIRONMENT)):
            continue
        digest = content_digest(path)
        now = _stat(path)
        if digest is None or not isinstance(now, os.stat_result) or stat_key(now) != stat_key(st):
            raise _NoRecord(f"{path} changed while the command ran")
        digests[path] = digest
    return digests
