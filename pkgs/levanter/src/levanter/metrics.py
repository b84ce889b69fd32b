"""Training metrics sinks: ``metrics.jsonl``, TensorBoard event files, and Weights & Biases when configured.

Object stores cannot append, so for a remote output the files are written in a local staging
folder and copied up by :meth:`MetricsWriter.sync` (at checkpoints and at the end). A resumed run
keeps the rows of the steps it does not redo and never logs a (step, metric) pair twice.
"""

from __future__ import annotations

import json
import math
import os
import re
import shutil
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from tensorboardX import SummaryWriter

from rigging import filesystem as fs
from rigging.tempdirs import LEVANTER_METRICS, LEVANTER_WANDB, owned_tempdir

if TYPE_CHECKING:
    from levanter.config import WandbConfig

__all__ = ["MetricsWriter"]


class MetricsWriter:
    """Writes one JSON object per line, the same scalars to TensorBoard, and to W&B if configured.

    Args:
        output_path: the run's output folder (local or remote).
        resume_step: the step the run resumes after; rows of later steps (from a killed attempt)
            are dropped, and metrics already logged at this step are not logged again.
        run_id: the run's name, recorded in the first row of this attempt and used by W&B.
        tags: labels recorded with the run id and sent to W&B.
        wandb: where to send metrics in W&B, or None.
        run_config: the run's config, sent to W&B.
        earlier_rows: another run's ``metrics.jsonl`` whose rows up to ``resume_step`` begin this
            one when it has none yet (a run started from that run's checkpoint).
    """

    def __init__(self, output_path: str, resume_step: int = 0, *, run_id: str | None = None,
                 tags: Sequence[str] = (), wandb: WandbConfig | None = None,
                 run_config: dict[str, Any] | None = None, earlier_rows: str | None = None):
        self.output_path = output_path
        self._remote = not fs.is_local(output_path)
        self._local_root = owned_tempdir(LEVANTER_METRICS) if self._remote else output_path
        os.makedirs(self._local_root, exist_ok=True)
        self.jsonl_path = os.path.join(self._local_root, "metrics.jsonl")
        self._resume_step = resume_step
        kept = self._keep_rows_up_to(resume_step, earlier_rows)
        self._logged_at_resume = {key for row in kept if row.get("step") == resume_step for key in row} - {"step"}
        self._file = open(self.jsonl_path, "a", encoding="utf-8")
        self._tb = SummaryWriter(os.path.join(self._local_root, "tensorboard"))
        self._wandb = _WandbRun(wandb, run_id, tags, run_config or {}) if wandb is not None else None
        run = {"run_id": run_id, "tags": list(tags)}
        if run_id is not None and not any(row.get("run_id") == run_id and row.get("tags") == run["tags"]
                                          for row in kept):
            self.write(resume_step, run)
            self._tb.add_text("run", f"{run_id} {' '.join(tags)}".strip(), resume_step)

    def _keep_rows_up_to(self, step: int, earlier_rows: str | None = None) -> list[dict[str, Any]]:
        """Drop rows logged after ``step`` by an earlier attempt (the resumed run redoes those steps).

        Without rows of its own, the run starts from ``earlier_rows`` (another run's) up to ``step``.
        Returns the rows kept.
        """
        source = fs.join(self.output_path, "metrics.jsonl")
        if not fs.exists(source):
            if earlier_rows is None or not fs.exists(earlier_rows):
                return []
            source = earlier_rows
        kept = []
        for line in fs.read_text(source).splitlines():
            if line.strip() and json.loads(line).get("step", 0) <= step:
                kept.append(json.loads(line))
        with open(self.jsonl_path, "w", encoding="utf-8") as f:
            f.write("".join(json.dumps(row) + "\n" for row in kept))
        return kept

    def write(self, step: int, values: dict[str, Any]) -> None:
        """Record ``values`` for ``step``."""
        if step == self._resume_step and self._logged_at_resume:
            values = {k: v for k, v in values.items() if k not in self._logged_at_resume}
            if not values:
                return
        row = {"step": step, **{k: _plain(v) for k, v in values.items()}}
        self._file.write(json.dumps(row) + "\n")
        self._file.flush()
        scalars = {k: v for k, v in values.items() if isinstance(v, int | float) and math.isfinite(v)}
        for key, value in scalars.items():
            self._tb.add_scalar(key, value, step)
        if self._wandb is not None and scalars:
            self._wandb.log(step, scalars)

    def sync(self) -> None:
        """Flush, and copy the staged files to a remote output."""
        self._file.flush()
        self._tb.flush()
        if not self._remote:
            return
        for rel, _size in fs.walk_files(self._local_root):
            with open(os.path.join(self._local_root, rel), "rb") as f:
                fs.atomic_write(fs.join(self.output_path, rel), f.read())

    def close(self) -> None:
        """Finish the W&B run (its folder is copied to ``<output>/wandb``), sync and close the files."""
        if self._wandb is not None:
            self._wandb.finish(fs.join(self.output_path, "wandb"))
        self.sync()
        self._file.close()
        self._tb.close()


class _WandbRun:
    """One W&B run, written in a scratch folder and copied (without W&B's symlinks) into the output."""

    def __init__(self, config: WandbConfig, run_id: str | None, tags: Sequence[str], run_config: dict):
        try:
            import wandb
        except ImportError:
            raise ImportError("wandb logging needs the wandb package: pip install 'levanter[wandb]'") from None
        self._wandb = wandb
        self._scratch = owned_tempdir(LEVANTER_WANDB)
        self._run = wandb.init(project=config.project, entity=config.entity, group=config.group,
                               mode=config.mode, name=run_id, id=_wandb_id(run_id) if run_id else None,
                               resume="allow" if run_id else None, tags=list(tags), config=run_config,
                               dir=self._scratch)

    def log(self, step: int, values: dict[str, float]) -> None:
        self._run.log(values, step=step)

    def finish(self, destination: str) -> None:
        self._run.finish()
        # finish() only tells W&B's service process the run ended; the service flushes and closes the
        # run's files afterwards, so copying them now could copy a run file holding nothing but its
        # header. Tearing the service down waits for that.
        self._wandb.teardown()
        root = os.path.join(self._scratch, "wandb")
        for dirpath, _dirs, files in os.walk(root):
            for name in files:
                full = os.path.join(dirpath, name)
                if os.path.islink(full):
                    continue
                rel = os.path.relpath(full, root).replace(os.sep, "/")
                with open(full, "rb") as f:
                    fs.atomic_write(fs.join(destination, rel), f.read())
        shutil.rmtree(self._scratch, ignore_errors=True)


def _wandb_id(run_id: str) -> str:
    """A W&B run id from a run name (W&B ids may not hold / \\ # ? % : or spaces)."""
    return re.sub(r"[/\\#?%:\s]+", "-", run_id).strip("-")[:128] or "run"


def _plain(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value
