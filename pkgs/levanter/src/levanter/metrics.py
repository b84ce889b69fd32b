"""Training metrics sinks: ``metrics.jsonl`` and TensorBoard event files.

Object stores cannot append, so for a remote output the files are written in a local staging
folder and copied up by :meth:`MetricsWriter.sync` (at checkpoints and at the end).
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from typing import Any

from tensorboardX import SummaryWriter

from rigging import filesystem as fs

__all__ = ["MetricsWriter"]


class MetricsWriter:
    """Writes one JSON object per line and the same scalars to TensorBoard."""

    def __init__(self, output_path: str, resume_step: int = 0):
        self.output_path = output_path
        self._remote = not fs.is_local(output_path)
        self._local_root = tempfile.mkdtemp(prefix="levanter-metrics-") if self._remote else output_path
        os.makedirs(self._local_root, exist_ok=True)
        self.jsonl_path = os.path.join(self._local_root, "metrics.jsonl")
        self._keep_rows_up_to(resume_step)
        self._file = open(self.jsonl_path, "a", encoding="utf-8")
        self._tb = SummaryWriter(os.path.join(self._local_root, "tensorboard"))

    def _keep_rows_up_to(self, step: int) -> None:
        """Drop rows logged after ``step`` by an earlier, killed attempt: the resumed run redoes them."""
        source = fs.join(self.output_path, "metrics.jsonl")
        if not fs.exists(source):
            return
        kept = [line for line in fs.read_text(source).splitlines()
                if line.strip() and json.loads(line).get("step", 0) <= step]
        with open(self.jsonl_path, "w", encoding="utf-8") as f:
            f.write("".join(line + "\n" for line in kept))

    def write(self, step: int, values: dict[str, Any]) -> None:
        """Record ``values`` for ``step``."""
        row = {"step": step, **{k: _plain(v) for k, v in values.items()}}
        self._file.write(json.dumps(row) + "\n")
        self._file.flush()
        for key, value in values.items():
            if isinstance(value, (int, float)) and math.isfinite(value):
                self._tb.add_scalar(key, value, step)

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
        """Sync and close the files."""
        self.sync()
        self._file.close()
        self._tb.close()


def _plain(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value
