"""``make train-nano`` then ``marin export-hf checkpoints/marin-nano -o nano-hf``: transformers reads it (issue 16).

Uses the nano prefix shared with ``test_train_nano``. The exported model, driven by transformers'
own tokenizer and greedy generation (its Flax Llama: no PyTorch here), writes the same text as
``marin sample`` does from the same parameters.
"""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

import pytest

from testsupport.doc_examples import doc_examples
from testsupport.e2e import clean_env, marin, nano_prefix, shares_nano_store


@shares_nano_store
@pytest.mark.slow
def test_exported_nano_generates_like_marin_sample(tmp_path_factory: pytest.TempPathFactory, tmp_path: Path) -> None:
    import jax.numpy as jnp
    from transformers import AutoTokenizer, FlaxLlamaForCausalLM

    prefix, first = nano_prefix(tmp_path_factory)
    assert first.returncode == 0, first.describe()
    env = clean_env(MARIN_PREFIX=str(prefix))
    out = tmp_path / "nano-hf"
    exported = marin("export-hf", "checkpoints/marin-nano", "-o", str(out), env=env)
    assert f"wrote {out}" in exported.stdout, exported.describe()

    tokenizer = AutoTokenizer.from_pretrained(str(out))
    model = FlaxLlamaForCausalLM.from_pretrained(str(out), from_pt=True, dtype=jnp.float32)
    prompt = tokenizer("Once upon a time", return_tensors="np").input_ids
    generated = model.generate(prompt, max_new_tokens=24, do_sample=False,
                               pad_token_id=tokenizer.eos_token_id).sequences[0]
    theirs = tokenizer.decode(generated, skip_special_tokens=True)

    ours = marin("sample", "checkpoints/marin-nano", "--prompt", "Once upon a time", "-n", "24", env=env)
    assert theirs.strip() == ours.stdout.strip(), (theirs, ours.describe())
    assert len(theirs.split()) >= 8

    # The Hugging Face guide's example, as written, from the folder holding nano-hf: the same text.
    [example] = [e for e in doc_examples() if '"nano-hf"' in e.code]
    printed = io.StringIO()
    with contextlib.chdir(tmp_path), contextlib.redirect_stdout(printed):
        exec(compile(example.code, example.id, "exec"), {"__name__": "doc_example"})  # noqa: S102
    assert printed.getvalue().strip() == theirs.strip()
