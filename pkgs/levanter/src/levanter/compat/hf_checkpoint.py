"""The Llama in Hugging Face's layout: ``config.json`` and ``model.safetensors``, both directions.

One table (:func:`_tensor_table`) says which Haiku parameter is which HF tensor; export and import
both read it. Haiku's ``Linear`` stores ``w`` as ``[in, out]`` and PyTorch's ``nn.Linear`` as
``[out, in]``, so projections are transposed. The rotary embedding here rotates the head
dimension's first half against its second half, exactly as HF's ``rotate_half`` does (same
frequencies, ``theta ** (-2i / head_dim)``), so q and k rows need no permutation.

The model keeps its layer weights stacked (``levanter.models.layout``); the files keep Hugging
Face's one tensor per layer: export unstacks, import stacks.

Files are written and read through ``rigging.filesystem`` (local, gs://, memory://); tensors go
through the ``safetensors`` byte format with numpy, no PyTorch.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Mapping
from typing import Any

import numpy as np

from levanter.compat.hub import HubIdInvalid, HubSnapshotMissing, hub_snapshot
from levanter.models.layout import stack_layers, unstack_layers
from levanter.models.llama import LlamaConfig
from rigging import filesystem as fs

__all__ = [
    "CONFIG_FILE",
    "SAFETENSORS_FILE",
    "SAFETENSORS_INDEX_FILE",
    "HfCheckpointError",
    "HfCheckpointNotFound",
    "from_hf_tensors",
    "hf_config",
    "llama_config_from_hf",
    "load_hf_params",
    "read_hf_config",
    "read_hf_tensors",
    "resolve_hf_folder",
    "save_hf_model",
    "to_hf_tensors",
]

CONFIG_FILE = "config.json"
SAFETENSORS_FILE = "model.safetensors"
SAFETENSORS_INDEX_FILE = "model.safetensors.index.json"

# Buffers some older checkpoints saved beside the weights; they are recomputed, never loaded.
_IGNORED_SUFFIXES = ("rotary_emb.inv_freq",)

# (HF config.json key, LlamaConfig field): the fields whose values must agree on import.
_CONFIG_FIELDS = (
    ("vocab_size", "vocab_size"),
    ("hidden_size", "hidden_dim"),
    ("intermediate_size", "intermediate_dim"),
    ("num_hidden_layers", "num_layers"),
    ("num_attention_heads", "num_heads"),
    ("num_key_value_heads", "num_kv_heads"),
    ("rope_theta", "rope_theta"),
    ("rms_norm_eps", "norm_eps"),
    ("tie_word_embeddings", "tie_embeddings"),
)


class HfCheckpointError(ValueError):
    """An HF checkpoint that does not fit the model; the message names the file, field or tensor."""


class HfCheckpointNotFound(FileNotFoundError):
    """A folder that does not exist, or a Hub id neither in the hub cache nor downloadable."""


@dataclasses.dataclass(frozen=True)
class _Tensor:
    """One parameter: where Haiku keeps it, what HF calls it, and whether the matrix is transposed."""

    module: str
    name: str
    hf_name: str
    transpose: bool


def _tensor_table(config: LlamaConfig) -> list[_Tensor]:
    table = [_Tensor("embed", "embeddings", "model.embed_tokens.weight", False)]
    for i in range(config.num_layers):
        hf, hk = f"model.layers.{i}", f"layer_{i}"
        table += [
            _Tensor(f"{hk}/attn_norm", "scale", f"{hf}.input_layernorm.weight", False),
            *(_Tensor(f"{hk}/attn/{p}", "w", f"{hf}.self_attn.{p}.weight", True)
              for p in ("q_proj", "k_proj", "v_proj", "o_proj")),
            _Tensor(f"{hk}/mlp_norm", "scale", f"{hf}.post_attention_layernorm.weight", False),
            *(_Tensor(f"{hk}/mlp/{p}", "w", f"{hf}.mlp.{p}.weight", True)
              for p in ("gate_proj", "up_proj", "down_proj")),
        ]
    table.append(_Tensor("final_norm", "scale", "model.norm.weight", False))
    if not config.tie_embeddings:
        table.append(_Tensor("lm_head", "w", "lm_head.weight", True))
    return table


# --------------------------------------------------------------------------- config.json

def hf_config(config: LlamaConfig, *, bos_token_id: int | None = None,
              eos_token_id: int | None = None) -> dict[str, Any]:
    """The ``config.json`` of ``LlamaForCausalLM`` describing the model ``config`` describes."""
    out: dict[str, Any] = {"architectures": ["LlamaForCausalLM"], "model_type": "llama"}
    out.update({hf_key: getattr(config, field) for hf_key, field in _CONFIG_FIELDS})
    out.update({
        "head_dim": config.head_dim,
        "max_position_embeddings": config.max_seq_len,
        "hidden_act": "silu",
        "attention_bias": False,
        "mlp_bias": False,
        "attention_dropout": 0.0,
        "rope_scaling": None,
        "pretraining_tp": 1,
        "initializer_range": 0.02,
        "use_cache": True,
        "torch_dtype": "float32",
        "bos_token_id": bos_token_id,
        "eos_token_id": eos_token_id,
    })
    return out


def llama_config_from_hf(hf: Mapping[str, Any], source: str = "config.json") -> LlamaConfig:
    """The :class:`LlamaConfig` of an HF Llama ``config.json``; raises if it needs what this model lacks."""
    _check_supported(hf, source)
    kwargs = {field: hf[key] for key, field in _CONFIG_FIELDS if key in hf}
    kwargs.setdefault("num_kv_heads", kwargs.get("num_heads"))
    kwargs["max_seq_len"] = hf.get("max_position_embeddings", LlamaConfig.max_seq_len)
    try:
        return LlamaConfig(**kwargs)
    except (TypeError, ValueError) as e:
        raise HfCheckpointError(f"{source}: {e}") from None


def _check_supported(hf: Mapping[str, Any], source: str) -> None:
    if hf.get("model_type") != "llama":
        raise HfCheckpointError(f"{source}: model_type is {hf.get('model_type')!r}, only 'llama' is supported")
    unsupported = {"hidden_act": "silu", "attention_bias": False, "mlp_bias": False, "rope_scaling": None}
    for key, supported in unsupported.items():
        if hf.get(key, supported) != supported:
            raise HfCheckpointError(f"{source}: {key}={hf[key]!r} is not supported (only {supported!r})")
    heads, hidden = hf.get("num_attention_heads"), hf.get("hidden_size")
    head_dim = hf.get("head_dim")
    if head_dim is not None and heads and hidden and head_dim * heads != hidden:
        raise HfCheckpointError(f"{source}: head_dim={head_dim} is not hidden_size / num_attention_heads "
                                f"({hidden} / {heads}); this model does not support that")


def _check_matches(hf: Mapping[str, Any], config: LlamaConfig, source: str) -> None:
    _check_supported(hf, source)
    for key, field in _CONFIG_FIELDS:
        default = hf.get("num_attention_heads") if key == "num_key_value_heads" else None
        theirs = hf.get(key, default)
        if key == "tie_word_embeddings" and theirs is None:
            theirs = False  # absent means untied in LlamaConfig
        ours = getattr(config, field)
        if theirs is None or theirs != ours:
            raise HfCheckpointError(
                f"{source}: {key} is {theirs!r} but the configured model has {field}={ours!r}")


def read_hf_config(folder: str) -> dict[str, Any]:
    """The parsed ``config.json`` of an HF checkpoint folder."""
    path = fs.join(folder, CONFIG_FILE)
    if not fs.exists(path):
        raise HfCheckpointError(f"{folder}: no {CONFIG_FILE} (not a Hugging Face model folder)")
    try:
        return json.loads(fs.read_text(path))
    except ValueError as e:
        raise HfCheckpointError(f"{path}: not valid JSON ({e})") from None


# --------------------------------------------------------------------------- tensors

def to_hf_tensors(config: LlamaConfig, params: Mapping[str, Mapping[str, Any]]) -> dict[str, np.ndarray]:
    """HF-named float32 tensors of the Haiku parameters ``params`` (C-contiguous, PyTorch layout),
    stacked or per layer."""
    params = unstack_layers(params)
    tensors = {}
    for t in _tensor_table(config):
        value = np.asarray(params[t.module][t.name], dtype=np.float32)
        tensors[t.hf_name] = np.ascontiguousarray(value.T if t.transpose else value)
    return tensors


def from_hf_tensors(config: LlamaConfig, tensors: Mapping[str, np.ndarray],
                    source: str = "checkpoint") -> dict[str, dict[str, np.ndarray]]:
    """Haiku parameters (float32, layers stacked) of the model ``config`` describes from HF-named ``tensors``.

    Raises:
        HfCheckpointError: a tensor is missing, has the wrong shape, or is not part of this model.
    """
    expected = _expected_shapes(config)
    table = _tensor_table(config)
    wanted = {t.hf_name for t in table}
    for name in tensors:
        tied_head = config.tie_embeddings and name == "lm_head.weight"
        if name not in wanted and not tied_head and not name.endswith(_IGNORED_SUFFIXES):
            raise HfCheckpointError(f"{source}: tensor {name} has no place in the configured model")
    params: dict[str, dict[str, np.ndarray]] = {}
    for t in table:
        if t.hf_name not in tensors:
            raise HfCheckpointError(f"{source}: tensor {t.hf_name} is missing")
        value = np.asarray(tensors[t.hf_name])
        value = value.T if t.transpose else value
        shape = expected[(t.module, t.name)]
        if value.shape != shape:
            hf_shape = tuple(reversed(shape)) if t.transpose else shape
            raise HfCheckpointError(f"{source}: tensor {t.hf_name} has shape {tuple(tensors[t.hf_name].shape)}, "
                                    f"the configured model needs {hf_shape}")
        params.setdefault(t.module, {})[t.name] = np.ascontiguousarray(value, dtype=np.float32)
    return stack_layers(params)


def _expected_shapes(config: LlamaConfig) -> dict[tuple[str, str], tuple[int, ...]]:
    d, kv, hd = config.hidden_dim, config.num_kv_heads * config.head_dim, config.num_heads * config.head_dim
    shapes = {("embed", "embeddings"): (config.vocab_size, d), ("final_norm", "scale"): (d,)}
    for i in range(config.num_layers):
        m = f"layer_{i}"
        shapes.update({
            (f"{m}/attn_norm", "scale"): (d,), (f"{m}/mlp_norm", "scale"): (d,),
            (f"{m}/attn/q_proj", "w"): (d, hd), (f"{m}/attn/k_proj", "w"): (d, kv),
            (f"{m}/attn/v_proj", "w"): (d, kv), (f"{m}/attn/o_proj", "w"): (hd, d),
            (f"{m}/mlp/gate_proj", "w"): (d, config.intermediate_dim),
            (f"{m}/mlp/up_proj", "w"): (d, config.intermediate_dim),
            (f"{m}/mlp/down_proj", "w"): (config.intermediate_dim, d),
        })
    if not config.tie_embeddings:
        shapes[("lm_head", "w")] = (d, config.vocab_size)
    return shapes


def _safetensors_dtype(name: str) -> np.dtype:
    import ml_dtypes

    known = {"F32": np.float32, "F16": np.float16, "BF16": ml_dtypes.bfloat16, "F64": np.float64}
    if name not in known:
        raise HfCheckpointError(f"tensor dtype {name} is not a floating-point weight type this loader reads")
    return np.dtype(known[name])


def _decode_safetensors(data: bytes, source: str) -> dict[str, np.ndarray]:
    # safetensors' own numpy loader has no bfloat16 (most hub checkpoints); decode through ml_dtypes.
    from safetensors import SafetensorError, deserialize

    try:
        entries = deserialize(data)
    except SafetensorError as e:
        raise HfCheckpointError(f"{source}: not a readable safetensors file ({e})") from None
    out = {}
    for name, view in entries:
        try:
            dtype = _safetensors_dtype(view["dtype"])
        except HfCheckpointError as e:
            raise HfCheckpointError(f"{source}: tensor {name}: {e}") from None
        out[name] = np.frombuffer(bytes(view["data"]), dtype=dtype).reshape(view["shape"]).astype(np.float32)
    return out


def read_hf_tensors(folder: str) -> dict[str, np.ndarray]:
    """Every tensor of an HF checkpoint folder (``model.safetensors`` or an index of shards), float32."""
    single = fs.join(folder, SAFETENSORS_FILE)
    if fs.exists(single):
        return _decode_safetensors(fs.read_bytes(single), single)
    index_path = fs.join(folder, SAFETENSORS_INDEX_FILE)
    if fs.exists(index_path):
        weight_map = json.loads(fs.read_text(index_path)).get("weight_map")
        if not isinstance(weight_map, dict) or not weight_map:
            raise HfCheckpointError(f"{index_path}: no weight_map")
        tensors: dict[str, np.ndarray] = {}
        for shard in sorted(set(weight_map.values())):
            path = fs.join(folder, shard)
            if not fs.exists(path):
                raise HfCheckpointError(f"{index_path}: shard {shard} is missing")
            tensors.update(_decode_safetensors(fs.read_bytes(path), path))
        return tensors
    raise HfCheckpointError(f"{folder}: no {SAFETENSORS_FILE} or {SAFETENSORS_INDEX_FILE} "
                            "(only safetensors weights are read; convert PyTorch .bin files first)")


# --------------------------------------------------------------------------- folders

def save_hf_model(folder: str, config: LlamaConfig, params: Mapping[str, Mapping[str, Any]], *,
                  bos_token_id: int | None = None, eos_token_id: int | None = None) -> None:
    """Write ``config.json`` and ``model.safetensors`` of ``params`` into ``folder``."""
    from safetensors.numpy import save

    tensors = to_hf_tensors(config, params)
    fs.atomic_write(fs.join(folder, SAFETENSORS_FILE), save(tensors, metadata={"format": "pt"}))
    config_json = hf_config(config, bos_token_id=bos_token_id, eos_token_id=eos_token_id)
    fs.atomic_write(fs.join(folder, CONFIG_FILE), json.dumps(config_json, indent=2) + "\n")


def load_hf_params(folder: str, config: LlamaConfig) -> dict[str, dict[str, np.ndarray]]:
    """Haiku parameters for the model ``config`` describes from the HF Llama checkpoint in ``folder``.

    Raises:
        HfCheckpointError: the checkpoint's config or a tensor does not fit ``config`` (one line
            naming the field or tensor), or the folder holds no readable safetensors weights.
    """
    _check_matches(read_hf_config(folder), config, fs.join(folder, CONFIG_FILE))
    return from_hf_tensors(config, read_hf_tensors(folder), source=folder)


# --------------------------------------------------------------------------- the hub cache

# What is fetched from the Hub for an import: configs and safetensors weights, never .bin files.
_HUB_FILES = ("*.json", "*.safetensors")


def resolve_hf_folder(repo: str, revision: str | None = None) -> str:
    """The folder holding an HF checkpoint: ``repo`` itself if it exists, else its snapshot in the hub cache.

    ``repo`` is a folder (local or fsspec URL) or a Hub model id (``org/name``). A Hub id is read
    from the cache (``HF_HUB_CACHE``, ``HF_HOME``) only when ``HF_HUB_OFFLINE=1``; otherwise the
    Hub is asked first and the cache used when it cannot be reached.

    Raises:
        HfCheckpointNotFound: no such folder, or the id is not cached and cannot be downloaded
            (one line naming the id, the revision and the cache folder).
    """
    if "://" in repo or os.path.isabs(repo) or fs.exists(repo):
        if not fs.exists(repo):
            raise HfCheckpointNotFound(f"HF checkpoint folder {repo!r} does not exist")
        return repo
    at = "" if revision is None else f" at revision {revision!r}"
    try:
        return hub_snapshot(repo, repo_type="model", revision=revision, allow_patterns=_HUB_FILES)
    except HubIdInvalid:
        raise HfCheckpointNotFound(f"HF checkpoint {repo!r} is neither an existing folder nor a Hub model id "
                                   "(org/name)") from None
    except HubSnapshotMissing as e:
        raise HfCheckpointNotFound(f"HF checkpoint {repo!r}{at} is {e.state}; cache: {e.cache}; download it where "
                                   "the Hub is reachable (same HF_HOME) or pass a local folder") from None
