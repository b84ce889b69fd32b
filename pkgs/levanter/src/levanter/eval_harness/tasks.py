"""Loading harness tasks whose data is on this machine: local files, or a dataset in the hub cache.

``datasets.load_dataset`` does not read the Hugging Face hub cache offline: it asks the Hub. So a
task's ``dataset_path`` is resolved here before the harness builds the task: a Hub dataset id
becomes its snapshot folder in the hub cache (``HF_HUB_OFFLINE=1``: the cache only; otherwise the
Hub is asked first), a relative local folder or ``data_files`` of a file-format builder (``json``,
``csv``, ...) is taken relative to the task's YAML file, not the working directory. A dataset
that is not there is one line naming the task, the dataset and what to do.

The hook is the harness's task factory, where every task config (named, from a YAML path, a tag
or a group member) is assembled; lm-eval is pinned in ``uv.lock``, so this private seam is stable.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from lm_eval.tasks import TaskManager
from lm_eval.tasks._factory import TaskFactory

from levanter.compat.hub import HubIdInvalid, HubSnapshotMissing, hub_snapshot
from levanter.eval_harness.errors import TaskDataUnavailable, UnknownTask

__all__ = ["TaskDataUnavailable", "UnknownTask", "check_task_data", "load_tasks", "task_manager"]

# datasets' file-format builders: their data_files are paths, not a dataset on the Hub.
_FILE_BUILDERS = frozenset({"json", "csv", "parquet", "text", "arrow", "pandas", "xml", "webdataset"})
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*(/[\w.-]+)?$")


def _is_yaml_path(spec: str) -> bool:
    return spec.endswith((".yaml", ".yml")) or os.sep in spec and os.path.isfile(spec)


def task_manager(specs: Sequence[str], include_paths: Sequence[str] = ()) -> TaskManager:
    """A ``TaskManager`` that knows every name in ``specs``: the include paths alone when they hold
    them all (indexing lm-eval's own thousands of tasks takes seconds), with lm-eval's tasks otherwise.

    Raises:
        UnknownTask: a name is not a task, group or tag anywhere, or a YAML path does not exist.
    """
    for folder in include_paths:
        if not os.path.isdir(folder):
            raise UnknownTask(f"task include path {folder!r} is not a folder")
    for spec in specs:
        if _is_yaml_path(spec) and not os.path.isfile(spec):
            raise UnknownTask(f"task YAML file {spec!r} does not exist")
    names = [s for s in specs if not _is_yaml_path(s)]
    manager = _Manager(list(include_paths), include_defaults=False)
    if any(name not in manager.task_index for name in names):
        manager = _Manager(list(include_paths), include_defaults=True)
    for name in names:
        if name not in manager.task_index:
            where = f" or in {list(include_paths)}" if include_paths else ""
            raise UnknownTask(f"unknown task {name!r}: not a task, group or tag of lm-eval{where}, nor a YAML file")
    return manager


def load_tasks(specs: Sequence[str], include_paths: Sequence[str] = ()) -> tuple[TaskManager, list[Any]]:
    """The harness's ``TaskManager`` and the tasks and groups ``specs`` name (a tag: its tasks), built.

    Raises:
        UnknownTask: see :func:`task_manager`.
        TaskDataUnavailable: a task's dataset is not on this machine and cannot be fetched.
    """
    manager = task_manager(specs, include_paths)
    built: list[Any] = []
    for spec in specs:
        loaded = manager.load([os.path.abspath(spec) if _is_yaml_path(spec) else spec])
        # A group comes back with its subgroups and tasks flattened beside it: keep the outermost.
        members = {child for children in loaded["group_map"].values() for child in children}
        groups = [group for name, group in loaded["groups"].items() if name not in members]
        built += groups or list(loaded["tasks"].values())
    return manager, built


def check_task_data(specs: Sequence[str], include_paths: Sequence[str] = ()) -> None:
    """Check that every task ``specs`` name (a group's and tag's members too) has its data on this
    machine, loading none of it: what :func:`load_tasks` would find missing, found before a run.

    Raises:
        UnknownTask: see :func:`task_manager`.
        TaskDataUnavailable: a task's dataset is not on this machine and cannot be fetched.
    """
    manager = task_manager(specs, include_paths)
    manager._factory = _CheckingFactory()  # the harness's seam (see the module docstring)
    manager.load([os.path.abspath(spec) if _is_yaml_path(spec) else spec for spec in specs])


class _Manager(TaskManager):
    def __init__(self, include_path: list[str], include_defaults: bool):
        super().__init__(include_path=include_path or None, include_defaults=include_defaults)
        self._factory = _LocalDataFactory()


class _LocalDataFactory(TaskFactory):
    def _load_full_config(self, entry: Any, overrides: dict[str, Any] | None = None) -> dict[str, Any]:
        config = super()._load_full_config(entry, overrides)
        base = Path(entry.yaml_path).parent if getattr(entry, "yaml_path", None) else Path.cwd()
        return localize_dataset(config, base)


class _Unbuilt:
    """A task whose config was localised but that was not built (its data is not read)."""

    def __init__(self, name: str):
        self.task_name = name


class _CheckingFactory(_LocalDataFactory):
    def _build_task(self, entry: Any, overrides: dict[str, Any] | None) -> Any:
        return _Unbuilt(self._load_full_config(entry, overrides)["task"])


def localize_dataset(config: dict[str, Any], base: Path) -> dict[str, Any]:
    """``config`` with its dataset made local: a Hub id becomes its hub-cache snapshot folder, relative
    paths are taken from ``base`` (the task YAML's folder). Configs without a ``dataset_path`` pass as they are.

    Raises:
        TaskDataUnavailable: the dataset is not a local folder and not in the hub cache.
    """
    path = config.get("dataset_path")
    if not isinstance(path, str) or callable(config.get("custom_dataset")):
        return config
    task = config.get("task") if isinstance(config.get("task"), str) else config.get("group", "?")
    kwargs = dict(config.get("dataset_kwargs") or {})
    if path in _FILE_BUILDERS:
        for key in ("data_files", "data_dir"):
            if key in kwargs:
                kwargs[key] = _relative_to(kwargs[key], base)
        return {**config, "dataset_kwargs": kwargs}
    local = Path(path) if os.path.isabs(path) else base / path
    if local.is_dir():
        return {**config, "dataset_path": str(local.resolve())}
    if os.path.isabs(path) or not _HUB_ID.match(path):
        raise TaskDataUnavailable(f"task {task!r}: dataset_path {path!r} is neither a folder nor a Hugging Face "
                                  f"dataset id; point it at the task's data")
    revision = kwargs.pop("revision", None)
    snapshot = _hub_snapshot(task, path, revision)
    metadata = {**(config.get("metadata") or {}), "hub_dataset": path, "hub_revision": os.path.basename(snapshot)}
    return {**config, "dataset_path": snapshot, "dataset_kwargs": kwargs, "metadata": metadata}


def _relative_to(files: Any, base: Path) -> Any:
    """``data_files`` (a path, a list of them, or split -> either) with relative local paths under ``base``."""
    if isinstance(files, str):
        return files if "://" in files or os.path.isabs(files) else str(base / files)
    if isinstance(files, dict):
        return {split: _relative_to(v, base) for split, v in files.items()}
    if isinstance(files, list | tuple):
        return [_relative_to(v, base) for v in files]
    return files


def _hub_snapshot(task: str, repo: str, revision: str | None) -> str:
    """The folder of dataset ``repo`` in the hub cache (downloaded into it first when online)."""
    at = "" if revision is None else f" at revision {revision!r}"
    try:
        return hub_snapshot(repo, repo_type="dataset", revision=revision)
    except HubIdInvalid:
        raise TaskDataUnavailable(f"task {task!r}: dataset_path {repo!r} is not a Hugging Face dataset id") from None
    except HubSnapshotMissing as e:
        raise TaskDataUnavailable(
            f"task {task!r} needs Hugging Face dataset {repo!r}{at}, which is {e.state}; cache: {e.cache}; download "
            f"it where the Hub is reachable (`hf download {repo} --repo-type dataset`, same HF_HOME) or point the "
            "task's dataset_path at local files") from None
