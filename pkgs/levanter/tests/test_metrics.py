"""metrics.jsonl, TensorBoard and Weights & Biases: what a run records, once per step and metric."""

from __future__ import annotations

import collections
import glob
import json
import os

import levanter.metrics
from levanter.config import WandbConfig
from levanter.metrics import MetricsWriter
from levanter.trainer import main
from rigging.tempdirs import LEVANTER_WANDB, owned_tempdir
from testsupport.levanter_data import tiny_config


def _rows(out: str) -> list[dict]:
    with open(os.path.join(out, "metrics.jsonl")) as f:
        return [json.loads(line) for line in f]


def _logged_twice(rows: list[dict]) -> list[tuple[int, str]]:
    counts = collections.Counter((row["step"], key) for row in rows for key in row if key != "step")
    return sorted(pair for pair, n in counts.items() if n > 1)


def test_resuming_a_finished_run_logs_nothing_twice(tiny_dataset, tmp_path):
    out = str(tmp_path / "run")
    cfg = tiny_config(tiny_dataset)
    main(cfg, out)
    first = _rows(out)
    assert any("val_loss" in r for r in first) and any("wall_s" in r for r in first)
    again = main(cfg, out)
    assert again.start_step == 2
    rows = _rows(out)
    assert _logged_twice(rows) == [] and rows == first


def test_rows_after_the_resume_step_are_dropped_and_new_keys_at_it_kept(tmp_path):
    out = str(tmp_path)
    with open(os.path.join(out, "metrics.jsonl"), "w") as f:
        for row in ({"step": 1, "loss": 3.0}, {"step": 2, "loss": 2.5}, {"step": 2, "val_loss": 2.7},
                    {"step": 3, "loss": 2.0}):
            f.write(json.dumps(row) + "\n")
    writer = MetricsWriter(out, resume_step=2)
    writer.write(2, {"val_loss": 2.7, "wall_s": 1.0})  # val_loss at 2 was logged; wall_s was not
    writer.write(3, {"loss": 2.1})
    writer.close()
    assert _rows(out) == [{"step": 1, "loss": 3.0}, {"step": 2, "loss": 2.5}, {"step": 2, "val_loss": 2.7},
                          {"step": 2, "wall_s": 1.0}, {"step": 3, "loss": 2.1}]


def test_run_id_and_tags_are_recorded_and_sent_to_wandb_offline(tiny_dataset, tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("WANDB_CONFIG_DIR", str(tmp_path / "wandb-config"))
    out = str(tmp_path / "run")
    made = []  # the run's staging folders: named for `marin gc` to find if the run is killed, gone after it

    def staging(prefix: str) -> str:
        made.append((prefix, owned_tempdir(prefix)))
        return made[-1][1]

    monkeypatch.setattr(levanter.metrics, "owned_tempdir", staging)
    cfg = tiny_config(tiny_dataset, run_id="nano-run/1", tags=("tiny", "pulse"), wandb=WandbConfig(project="tests"))
    result = main(cfg, out)
    assert [prefix for prefix, _ in made] == [LEVANTER_WANDB] and not os.path.exists(made[0][1])
    assert result.run_id == "nano-run/1"
    rows = _rows(out)
    assert rows[0] == {"step": 0, "run_id": "nano-run/1", "tags": ["tiny", "pulse"]}
    # W&B's own offline run folder, copied into the output without its symlinks; the id is the
    # run id made safe for W&B.
    runs = glob.glob(os.path.join(out, "wandb", "offline-run-*-nano-run-1"))
    assert len(runs) == 1, os.listdir(os.path.join(out, "wandb"))
    record = open(os.path.join(runs[0], "run-nano-run-1.wandb"), "rb").read()
    for expected in (b"nano-run/1", b"tiny", b"pulse", b"loss", b"val_loss", b"tests"):
        assert expected in record, expected
    assert not [p for p in glob.glob(os.path.join(out, "**"), recursive=True) if os.path.islink(p)]


def test_without_a_run_id_the_output_folder_names_the_run(tiny_dataset, tmp_path):
    out = str(tmp_path / "marin-nano-0123456789abcdef")
    assert main(tiny_config(tiny_dataset, num_train_steps=1, eval_batches=0), out).run_id == \
        "marin-nano-0123456789abcdef"
    assert _rows(out)[0] == {"step": 0, "run_id": "marin-nano-0123456789abcdef", "tags": []}
    assert not os.path.exists(os.path.join(out, "wandb"))
