"""Pretrain -> chat tokenize -> fine-tune -> evaluate: the nano Llama learns to answer about stories.

``marin run experiments/sft/`` builds it (a few minutes on CPU; the pretraining step is the one
``make train-nano`` builds, so it is shared when that ran first). The fine-tune starts from the
pretrained model's final parameters (``initialize_from=checkpoint(nano_model)``); the chat
template's special tokens are new to its tokenizer, so its vocabulary grows by them (old rows kept).
An eval step per model scores it on the held-out conversations (loss over the assistant's tokens
only, as the fine-tune minimises it), and both run the five story tasks (the pretrained model's
task steps are ``make train-nano``'s: one step per checkpoint and task, whoever asks);
``marin compare experiments/sft/`` and the report put the two side by side, and
``reports/story-tasks`` is their table (``eval_report.md``). Then ask the fine-tuned model a question::

    marin sample checkpoints/marin-nano-sft --chat --prompt "$(cat story.txt) Who is the story about?"
"""

from __future__ import annotations

from experiments.llama import llama_nano
from experiments.marin_tokenizer import marin_tokenizer
from experiments.scale import sized
from experiments.train_nano import nano_model, nano_tasks, story, tinystories
from levanter.checkpoint import CheckpointConfig
from levanter.optim import AdamConfig
from marin.experiment import (
                           DEFAULT_CHAT_TEMPLATE,
                           checkpoint,
                           eval_report,
                           evaluate,
                           story_chats,
                           tokenized_chat,
                           train_lm,
)

SEQ_LEN = 256

chats = story_chats("raw/story-chats", num_conversations=2000)

chat_data = tokenized_chat("tokenized/story-chats", source=chats, tokenizer=marin_tokenizer,
                           template=DEFAULT_CHAT_TEMPLATE, max_seq_len=SEQ_LEN, validation_fraction=0.05)

sft_model = train_lm(
    name="checkpoints/marin-nano-sft",
    version="v1",
    model=llama_nano,
    optimizer=AdamConfig(learning_rate=2e-3, weight_decay=0.0, warmup=10, min_lr_ratio=0.1),
    datasets={chat_data: 1.0},
    batch_size=sized(16, 8),
    seq_len=SEQ_LEN,
    # Smoke size (experiments.scale): a third of the steps of half the batch, still enough to learn
    # the chat format.
    num_train_steps=sized(300, 100),
    eval_every=sized(50, 25),
    checkpoint=CheckpointConfig(save_every=sized(100, 50)),
    initialize_from=checkpoint(nano_model),
)

# Both models on the held-out conversations (assistant tokens) and on the pretraining text's
# validation split (what fine-tuning cost there).
evaluations = [evaluate(f"evals/story-chats/{label}", model, {"story-chats": chat_data, "tinystories": tinystories})
               for label, model in (("pretrained", nano_model), ("fine-tuned", sft_model))]

# Both models on the story tasks, and the two evaluations in one table.
sft_tasks = evaluate("evals/marin-nano-sft/story-tasks", sft_model, tasks=story, limit=sized(None, 20))
task_table = eval_report("reports/story-tasks", {"pretrained": nano_tasks, "fine-tuned": sft_tasks})

steps = [*evaluations, task_table]
