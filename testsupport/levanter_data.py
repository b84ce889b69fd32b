"""A tiny trainer config shared by the trainer tests and their subprocesses."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from array_record.python.array_record_module import ArrayRecordWriter

from levanter.checkpoint import CheckpointConfig
from levanter.config import TrainLmConfig, config_to_dict
from levanter.data import DatasetSpec
from levanter.models.llama import LlamaConfig
from levanter.optim import AdamConfig
from rigging import filesystem as fs
from testsupport.cpu_devices import cpu_device_env
from zephyr.shards import TOKENIZED_FORMAT, write_index

TINY_MODEL = LlamaConfig(vocab_size=64, hidden_dim=32, intermediate_dim=64, num_heads=2, num_kv_heads=1,
                         num_layers=2, max_seq_len=64)
"""The model of :func:`tiny_config`."""
TINY_OPTIMIZER = AdamConfig(learning_rate=3e-3, warmup=2, weight_decay=0.1)
"""The optimizer of :func:`tiny_config`."""


def tiny_config(data: str, **overrides) -> TrainLmConfig:
    """Nano-sized model, 8 x 32 batches, float32, checkpoints every 2 steps.

    ``overrides`` are ``model=``, ``optimizer=`` or any flat training setting (``num_train_steps=``).
    """
    base: dict[str, Any] = dict(
        model=TINY_MODEL,
        optimizer=TINY_OPTIMIZER,
        batch_size=8,
        seq_len=32,
        num_train_steps=2,
        eval_batches=2,
        checkpoint=CheckpointConfig(save_every=2, keep_last=2),
        peak_flops_per_device=1e11,
    )
    base.update(overrides)
    return TrainLmConfig.from_settings((DatasetSpec(data),), **base)


def start_trainer(config: TrainLmConfig, out: str, config_path: str, *, devices: int = 1) -> subprocess.Popen:
    """Start ``python -m levanter.trainer`` on ``config`` writing to ``out`` in a new process (``devices`` CPU devices)."""
    with open(config_path, "w") as f:
        json.dump(config_to_dict(config), f)
    env = cpu_device_env(devices)
    return subprocess.Popen([sys.executable, "-m", "levanter.trainer", config_path, out], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def final_params(out: str) -> dict[str, np.ndarray]:
    """The flattened final parameters of a finished run."""
    with np.load(os.path.join(out, "final", "params.npz")) as f:
        return {k: f[k] for k in f.files}


def write_tokenized(root: str, splits: Mapping[str, Sequence[Sequence[int]] | Sequence[np.ndarray]], *, vocab_size: int,
                    eos_id: int, docs_per_shard: int = 1_000_000, format_name: str = TOKENIZED_FORMAT,
                    **metadata: Any) -> str:
    """Write ``splits`` (split name -> documents of token ids, or of a record's uint32 words) under
    ``root`` with an index of ``format_name`` (and ``metadata``); return ``root``."""
    index = {"format": format_name, "vocab_size": vocab_size, "eos_id": eos_id, **metadata, "splits": {}}
    for split, docs in splits.items():
        os.makedirs(os.path.join(root, split), exist_ok=True)
        shards = []
        for shard_no, start in enumerate(range(0, len(docs), docs_per_shard)):
            rel = f"{split}/part-{shard_no:05d}.array_record"
            writer = ArrayRecordWriter(os.path.join(root, rel), "group_size:1")
            chunk = docs[start:start + docs_per_shard]
            for doc in chunk:
                writer.write(np.asarray(doc, "<u4").tobytes())
            writer.close()
            path = os.path.join(root, rel)
            shards.append({"path": rel, "records": len(chunk), "tokens": sum(map(len, chunk)),
                           "bytes": os.path.getsize(path), "sha256": fs.sha256_of(path)})
        index["splits"][split] = {"records": len(docs), "tokens": sum(map(len, docs)), "shards": shards}
    write_index(root, index)
    return root


def random_params(config: LlamaConfig, seed: int = 0) -> dict:
    """Random parameters of ``config``'s shapes: weights N(0, 0.05), norm scales 1 + N(0, 0.05) (not all ones).

    Drawn with numpy from the shapes Haiku reports (``eval_shape``): compiling Haiku's initialisers
    costs tens of seconds on a small CPU, and tests need only some fixed, varied numbers.
    """
    import jax
    import jax.numpy as jnp

    from levanter.models.llama import transformed_llama

    shapes = jax.eval_shape(lambda key: transformed_llama(config).init(key, jnp.zeros((1, 8), jnp.int32)),
                            jax.random.PRNGKey(0))
    rng = np.random.default_rng(seed)
    return {module: {name: ((1.0 if name == "scale" else 0.0) + 0.05 * rng.standard_normal(leaf.shape)).astype(np.float32)
                     for name, leaf in sorted(leaves.items())}
            for module, leaves in sorted(shapes.items())}


def head_problem(seed: int, batch: int, seq: int, hidden: int, vocab: int, head_scale: float) -> tuple[Any, ...]:
    """``(hidden [batch, seq, hidden], head [hidden, vocab], targets [batch, seq], weights [batch, seq])``
    for the loss over the output head: standard normal hidden states, a normal head times
    ``head_scale``, uniform targets, weights 1 with probability 0.7 and 0 otherwise; JAX arrays of
    float32 (int32 targets). Drawn with numpy: JAX's samplers, run eagerly, compile a program per shape.
    """
    import jax.numpy as jnp

    rng = np.random.default_rng(seed)
    return (jnp.asarray(rng.standard_normal((batch, seq, hidden)), jnp.float32),
            jnp.asarray(rng.standard_normal((hidden, vocab)) * head_scale, jnp.float32),
            jnp.asarray(rng.integers(0, vocab, (batch, seq)), jnp.int32),
            jnp.asarray(rng.uniform(size=(batch, seq)) > 0.3, jnp.float32))


def byte_level_tokenizer(texts: Sequence[str], vocab_size: int, eos_token: str = "<|endoftext|>") -> str:
    """The ``tokenizer.json`` text of a byte-level BPE trained on ``texts`` (``eos_token`` is id 0)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=[eos_token], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tokenizer.train_from_iterator(texts, trainer=trainer)
    return tokenizer.to_str()


def pattern_documents(n: int, vocab_size: int, seed: int) -> list[list[int]]:
    """Documents with learnable structure (arithmetic runs) so the loss can fall in a few steps."""
    rng = np.random.default_rng(seed)
    docs = []
    for _ in range(n):
        start, stride, length = rng.integers(1, vocab_size - 1), rng.integers(1, 4), rng.integers(5, 40)
        docs.append([int(1 + (start + stride * i) % (vocab_size - 1)) for i in range(length)])
    return docs


# --------------------------------------------------------------------------- runs on N CPU devices

def _flat_state(state) -> dict[str, np.ndarray]:
    import jax

    return {jax.tree_util.keystr(path): np.asarray(jax.device_get(leaf))
            for path, leaf in jax.tree_util.tree_leaves_with_path(state)}


def restore_state(config: TrainLmConfig, out: str) -> dict:
    """Restore the newest checkpoint of the run in ``out`` onto ``config.trainer.mesh`` (this process's devices).

    Returns ``{"step", "values": {leaf path: array}, "specs": {leaf path: partition spec as a list}}``.
    """
    import jax

    from levanter.checkpoint import Checkpointer
    from levanter.sharding import make_mesh
    from levanter.trainer import abstract_state, checkpoint_dir

    trainer = config.trainer
    mesh = make_mesh(trainer.mesh)
    target = abstract_state(config.model, config.optimizer.build(trainer.num_train_steps), mesh)
    checkpointer = Checkpointer(checkpoint_dir(out), trainer.checkpoint)
    try:
        restored = checkpointer.restore_latest(target)
    finally:
        checkpointer.close()
    assert restored is not None, f"no checkpoint under {checkpoint_dir(out)}"
    specs = {jax.tree_util.keystr(path): list(leaf.sharding.spec)
             for path, leaf in jax.tree_util.tree_leaves_with_path(restored.state)}
    assert all(leaf.sharding.mesh.shape == mesh.shape for leaf in jax.tree.leaves(restored.state))
    return {"step": restored.step, "values": _flat_state(restored.state), "specs": specs}


def run_on_devices(command: str, runs: Sequence[tuple[TrainLmConfig, str]], workdir: str, *, devices: int,
                   timeout: float = 600) -> list[dict]:
    """Run ``command`` ("train" or "restore") on each ``(config, output path)`` in one new process with
    ``devices`` CPU devices.

    "train" returns each run's ``main`` result; "restore" returns :func:`restore_state`'s dict, with
    the values written to ``<workdir>/restored-<i>.npz`` and read back here.
    """
    os.makedirs(workdir, exist_ok=True)
    args = []
    for i, (config, out) in enumerate(runs):
        path = os.path.join(workdir, f"config-{i}.json")
        with open(path, "w") as f:
            json.dump(config_to_dict(config), f)
        args += [path, out]
    env = cpu_device_env(devices)
    proc = subprocess.run([sys.executable, os.path.abspath(__file__), command, *args], env=env,
                          capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-4000:]
    results = json.loads(proc.stdout.strip().splitlines()[-1])
    if command == "restore":
        for i, result in enumerate(results):
            with np.load(os.path.join(workdir, f"restored-{i}.npz")) as f:
                result["values"] = {k: f[k] for k in f.files}
    return results


def _main(argv: list[str]) -> None:
    from levanter.config import config_from_dict
    from levanter.trainer import main

    command, args = argv[0], argv[1:]
    results = []
    for i in range(0, len(args), 2):
        config, out = config_from_dict(json.load(open(args[i]))), args[i + 1]
        if command == "train":
            results.append(main(config, out).to_json())
        elif command == "restore":
            result = restore_state(config, out)
            np.savez(os.path.join(os.path.dirname(args[i]), f"restored-{i // 2}.npz"), **result.pop("values"))
            results.append(result)
        else:
            raise SystemExit(f"unknown command {command!r}: use train or restore")
    print(json.dumps(results, default=str))


def pattern_pairs(n: int, vocab_size: int, seed: int) -> list[np.ndarray]:
    """Preference pairs over arithmetic runs: a prompt (a header id, then four steps of a run), the run's
    next six steps chosen, the same six steps running backwards rejected (as record words)."""
    from levanter.data.preference import encode_pair

    rng = np.random.default_rng(seed)
    header, out = vocab_size - 1, []
    for _ in range(n):
        start, stride = int(rng.integers(1, vocab_size - 2)), int(rng.integers(1, 4))
        run = [1 + (start + stride * i) % (vocab_size - 2) for i in range(10)]
        prompt = [header, *run[:4]]
        wrong = [1 + (run[3] - stride * (i + 1)) % (vocab_size - 2) for i in range(6)]
        sides = [(prompt + completion, [0] * len(prompt) + [1] * len(completion)) for completion in (run[4:], wrong)]
        out.append(np.frombuffer(encode_pair(sides[0], sides[1]), "<u4"))
    return out


def write_pattern_pairs(root: str, vocab_size: int = 64, train: int = 160, validation: int = 32) -> str:
    """A preference dataset of :func:`pattern_pairs` (``marin.tokenized_preference/v1``, 11-token sides)."""
    from levanter.data.chat import PREFERENCE_FORMAT

    return write_tokenized(root, {"train": pattern_pairs(train, vocab_size, seed=1),
                                  "validation": pattern_pairs(validation, vocab_size, seed=2)},
                           vocab_size=vocab_size, eos_id=0, format_name=PREFERENCE_FORMAT, max_seq_len=16)


if __name__ == "__main__":
    _main(sys.argv[1:])

