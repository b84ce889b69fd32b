"""Training checkpoints with Orbax (TensorStore-backed), local or gs://.

A checkpoint is one Orbax step folder holding two items: ``state`` (params, optimizer state, step,
PRNG key; a PyTree) and ``data`` (the input iterator's position, JSON). Orbax only lists a step
once its save committed, so a save killed half-way is never seen; a committed step that fails to
restore (corrupt files) is skipped for the previous one with a warning.

Checkpoints written before the layers were stacked (``layer_<i>/...`` parameters and moments) are
read in that layout and stacked on read (``levanter.models.layout``), never taken for broken ones.
"""

from __future__ import annotations

import dataclasses
import logging
import re
import threading
import time
from typing import Any

from levanter.models.layout import is_per_layer, stack_layers, stack_tree, unstack_tree
from rigging import filesystem as fs

__all__ = [
    "CheckpointConfig",
    "Checkpointer",
    "RestoredCheckpoint",
    "checkpoint_dir",
    "committed_steps",
    "read_checkpoint_params",
    "restore_checkpoint",
    "restore_parts",
    "saved_arrays",
    "saved_per_layer",
]

logger = logging.getLogger(__name__)

# What a committed-but-broken checkpoint raises on restore: missing files (OSError), unreadable
# TensorStore or JSON data (ValueError), a tree missing entries (KeyError), and Orbax's own
# wrapping of TensorStore failures (RuntimeError).
_RESTORE_ERRORS = (OSError, ValueError, KeyError, RuntimeError)

# What Orbax writes into a step folder once its save has committed.
_COMMIT_MARKER = "commit_success.txt"


def checkpoint_dir(output_path: str) -> str:
    """Where a run writing to ``output_path`` keeps its checkpoints (and finds them to resume)."""
    return fs.join(output_path, "checkpoints")


@dataclasses.dataclass(frozen=True)
class CheckpointConfig:
    """When checkpoints are written and which are kept."""

    save_every: int = 100
    """Save after every this many steps (and always after the last step)."""
    keep_last: int = 2
    """Keep this many most recent checkpoints."""
    keep_every: int | None = None
    """Also keep, permanently, every checkpoint whose step is a multiple of this (None: none)."""
    async_save: bool = True
    """Write in the background while training continues (only the device-to-host copy blocks)."""

    def __post_init__(self) -> None:
        if self.save_every <= 0:
            raise ValueError(f"save_every must be > 0, got {self.save_every}")
        if self.keep_last <= 0:
            raise ValueError(f"keep_last must be > 0, got {self.keep_last}")
        if self.keep_every is not None and self.keep_every <= 0:
            raise ValueError(f"keep_every must be > 0 or None, got {self.keep_every}")


@dataclasses.dataclass(frozen=True)
class RestoredCheckpoint:
    """What a resume reads back."""

    step: int
    """The step the checkpoint was taken after (number of completed steps)."""
    state: Any
    """The training state PyTree, with the structure and shardings of the restore target."""
    data_state: dict
    """The input iterator state to pass to ``set_state``."""


def _snapshot(jax: Any, state: Any) -> Any:
    """A copy of ``state`` that outlives the caller's next step (which may donate its buffers).

    With one process the arrays are copied to host memory (every shard is local). Across processes
    no process holds the whole array, so each array is copied on its devices instead and Orbax
    writes each process's shards from there.
    """
    leaves = [x for x in jax.tree.leaves(state) if isinstance(x, jax.Array)]
    if all(x.is_fully_addressable for x in leaves):
        return jax.device_get(state)
    # One program copies every array: an array's own ``copy()`` compiles a program per shape and
    # placement (a dozen for a tiny model, in every process).
    arrays, rebuild = _split_arrays(jax, state)
    return rebuild(jax.jit(_copies, out_shardings=[x.sharding for x in arrays])(arrays))


def _copies(arrays: list[Any]) -> list[Any]:
    return [x.copy() for x in arrays]


def _split_arrays(jax: Any, tree: Any) -> tuple[list[Any], Any]:
    """``tree``'s JAX arrays, and ``copies -> tree`` with them replaced by ``copies`` (other leaves kept)."""
    leaves, treedef = jax.tree.flatten(tree)
    where = [i for i, x in enumerate(leaves) if isinstance(x, jax.Array)]

    def rebuild(copies: list[Any]) -> Any:
        out = list(leaves)
        for i, copy in zip(where, copies, strict=True):
            out[i] = copy
        return jax.tree.unflatten(treedef, out)

    return [leaves[i] for i in where], rebuild


class Checkpointer:
    """Saves and restores training checkpoints under ``directory``."""

    def __init__(self, directory: str, config: CheckpointConfig):
        import orbax.checkpoint as ocp  # deferred: CheckpointConfig is named by experiment files

        self._ocp = ocp
        self.directory = directory
        self.config = config
        self.blocked_seconds = 0.0
        if fs.is_local(directory):
            fs.makedirs(directory)
        options = self._ocp.CheckpointManagerOptions(
            max_to_keep=config.keep_last,
            keep_period=config.keep_every,
            enable_async_checkpointing=config.async_save,
            create=True,
        )
        self._manager = self._ocp.CheckpointManager(directory, options=options, item_names=("state", "data"))
        # Orbax's own "async" save still does its directory and metadata work on the caller's
        # thread; with async_save, the whole save runs on this thread instead, one at a time.
        self._pending: threading.Thread | None = None
        self._pending_error: BaseException | None = None

    def steps(self) -> list[int]:
        """Committed checkpoint steps, oldest first."""
        self._join_pending()
        self._manager.reload()
        return sorted(self._manager.all_steps())

    def save(self, step: int, state: Any, data_state: dict, *, wait: bool = False) -> None:
        """Start saving ``state`` and ``data_state`` as checkpoint ``step``.

        Only copying the arrays to host memory (and waiting for the previous save, if it is
        still writing) blocks, timed in ``blocked_seconds``; the writes finish in the background
        unless ``wait`` or ``async_save`` is off.
        """
        import jax

        start = time.perf_counter()
        self._join_pending()
        args = self._ocp.args.Composite(state=self._ocp.args.StandardSave(_snapshot(jax, state)),
                                        data=self._ocp.args.JsonSave(data_state))

        def write() -> None:
            try:
                self._manager.save(step, args=args, force=True)
                self._manager.wait_until_finished()
            except BaseException as e:  # noqa: BLE001 - raised on the training thread at the next join
                self._pending_error = e

        if self.config.async_save and not wait:
            self._pending = threading.Thread(target=write, name=f"checkpoint-{step}", daemon=False)
            self._pending.start()
        else:
            write()
            self._raise_pending_error()
        self.blocked_seconds += time.perf_counter() - start

    def _join_pending(self) -> None:
        if self._pending is not None:
            self._pending.join()
            self._pending = None
        self._raise_pending_error()

    def _raise_pending_error(self) -> None:
        if self._pending_error is not None:
            error, self._pending_error = self._pending_error, None
            raise error

    def wait(self) -> None:
        """Block until every save started so far is committed."""
        start = time.perf_counter()
        self._join_pending()
        self._manager.wait_until_finished()
        self.blocked_seconds += time.perf_counter() - start

    def restore_latest(self, target: Any) -> RestoredCheckpoint | None:
        """Restore the newest checkpoint that reads back, or None when there is none.

        ``target`` is a PyTree of arrays or ``jax.ShapeDtypeStruct`` (with shardings) giving the
        structure to restore into. A checkpoint that fails to restore is deleted after a warning,
        so that training can save that step again.
        """
        for step in reversed(self.steps()):
            try:
                restored = _restore(self._manager, self._ocp, self.directory, step, target)
            except _RESTORE_ERRORS as e:
                logger.warning("checkpoint %s/%s is unreadable (%s: %s); falling back to the previous one",
                               self.directory, step, type(e).__name__, str(e).splitlines()[0][:300])
                self._discard(step)
                continue
            return restored
        return None

    def _discard(self, step: int) -> None:
        self._manager.delete(step)
        self._manager.reload()

    def close(self) -> None:
        """Wait for pending saves and release Orbax's threads."""
        self.wait()
        self._manager.close()


_PER_LAYER_KEY = re.compile(r"'layer_\d+/")


def saved_per_layer(directory: str, step: int) -> bool:
    """Whether checkpoint ``step`` under ``directory`` holds per-layer parameters (written before the
    layers were stacked), read from the state item's Orbax metadata file without loading it."""
    path = fs.join(directory, str(step), "state", "_METADATA")
    return fs.exists(path) and _PER_LAYER_KEY.search(fs.read_text(path)) is not None


def saved_arrays(directory: str, step: int) -> Any:
    """The state item of committed checkpoint ``step`` under ``directory`` as Orbax's metadata tree
    (nested dicts and lists of ``ArrayMetadata``: each array's shape and dtype), reading no array.

    Raises:
        FileNotFoundError: ``step`` is not a committed checkpoint there.
    """
    import orbax.checkpoint as ocp

    if step not in committed_steps(directory):
        _read_only_manager(directory, step)  # raises, listing the steps kept
    path = fs.join(directory, str(step), "state")
    with ocp.StandardCheckpointer() as reader:
        metadata = reader.metadata(path).item_metadata
    if metadata is None:
        raise FileNotFoundError(f"{path}: no array metadata (not an Orbax state item)")
    return metadata.tree


def _restore(manager: Any, ocp: Any, directory: str, step: int, target: Any) -> RestoredCheckpoint:
    """Checkpoint ``step`` in the structure, layout and placement of ``target`` (a per-layer one
    is restored as it was written, then stacked and placed as ``target`` says)."""
    legacy = saved_per_layer(directory, step)
    restored = manager.restore(step, args=ocp.args.Composite(
        state=ocp.args.StandardRestore(unstack_tree(target) if legacy else target), data=ocp.args.JsonRestore()))
    state = restored.state
    if legacy:
        import jax

        logger.info("checkpoint %s/%s has per-layer parameters; stacking them", directory, step)
        shardings = jax.tree.map(lambda t: getattr(t, "sharding", None), target)
        state = jax.device_put(stack_tree(state), shardings)
    return RestoredCheckpoint(step=step, state=state, data_state=restored.data)


def committed_steps(directory: str) -> list[int]:
    """Committed checkpoint steps under ``directory``, oldest first, read without loading Orbax.

    For planning (which must stay cheap): a step folder counts once Orbax's commit marker is in
    it. Training itself asks Orbax (:meth:`Checkpointer.steps`).
    """
    if not fs.exists(directory):
        return []
    return sorted(int(name) for name in fs.listdir(directory)
                  if name.isdigit() and fs.exists(fs.join(directory, name, _COMMIT_MARKER)))


def _read_only_manager(directory: str, step: int) -> Any:
    """An Orbax manager that can only read ``directory``; raises FileNotFoundError unless ``step`` is there."""
    import orbax.checkpoint as ocp

    kept = committed_steps(directory)
    if step not in kept:
        raise FileNotFoundError(f"{directory}: no committed checkpoint of step {step} (committed: {kept or 'none'}); "
                                "keep it with CheckpointConfig(keep_every=...)")
    options = ocp.CheckpointManagerOptions(create=False, read_only=True)
    return ocp.CheckpointManager(directory, options=options, item_names=("state", "data"))


def read_checkpoint_params(directory: str, step: int, *, ema: bool = False) -> dict[str, Any]:
    """The model parameters of committed checkpoint ``step`` under ``directory`` (host numpy arrays);
    with ``ema``, the average of them the run kept beside them (``levanter.ema``).

    Reads only the ``state`` item, without a restore target (no model or optimizer needed).

    Raises:
        FileNotFoundError: ``step`` is not a committed checkpoint there (the message lists those that
            are), or ``ema`` is asked of a checkpoint without an average.
    """
    import numpy as np
    import orbax.checkpoint as ocp

    with _read_only_manager(directory, step) as manager:
        restored = manager.restore(step, args=ocp.args.Composite(state=ocp.args.StandardRestore()))
    item = "ema" if ema else "params"
    if item not in restored.state:
        raise FileNotFoundError(f"{directory}/{step}: the checkpoint holds no average of the parameters "
                                "(the run kept none: train it with ema=...)")
    params = {module: {name: np.asarray(value) for name, value in names.items()}
              for module, names in restored.state[item].items()}
    return stack_layers(params) if is_per_layer(params) else params


def restore_parts(directory: str, step: int, item: Any) -> RestoredCheckpoint:
    """Only the arrays of checkpoint ``step`` under ``directory`` that ``item`` asks for: ``item`` has
    the structure of :func:`saved_arrays`, a ``jax.ShapeDtypeStruct`` (with its sharding) for each
    array to read and Orbax's placeholder (``orbax.checkpoint.PLACEHOLDER``) for each to leave,
    which the result holds in its place.

    Raises:
        FileNotFoundError: there is no committed checkpoint ``step`` (the message lists those kept).
    """
    import jax
    import orbax.checkpoint as ocp

    def restore_args(leaf: Any) -> Any:
        if leaf is ocp.PLACEHOLDER:
            return leaf
        return ocp.ArrayRestoreArgs(sharding=leaf.sharding, global_shape=tuple(leaf.shape), dtype=leaf.dtype)

    # PyTreeRestore, not StandardRestore: only it leaves placeholders unread (the files are the same).
    args = ocp.args.PyTreeRestore(item=item, restore_args=jax.tree.map(restore_args, item))
    with _read_only_manager(directory, step) as manager:
        restored = manager.restore(step, args=ocp.args.Composite(state=args, data=ocp.args.JsonRestore()))
    return RestoredCheckpoint(step=step, state=restored.state, data_state=restored.data)


def restore_checkpoint(directory: str, step: int, target: Any) -> RestoredCheckpoint:
    """Read checkpoint ``step`` of another run into the structure of ``target``, changing nothing there.

    Raises:
        FileNotFoundError: there is no committed checkpoint ``step`` (the message lists those kept).
    """
    import orbax.checkpoint as ocp

    with _read_only_manager(directory, step) as manager:
        return _restore(manager, ocp, directory, step, target)
