"""TRL 1.12.0's PPOTrainer, built and run one way for every comparison (bench and lesson 10).

TRL's PPOTrainer exists only up to TRL 1.12.0, in ``trl.experimental.ppo``; ``require_trl``
says how to install that version. The pieces:

    trl_tokenizer, trl_prompt_ids   the tokenizer (left padding, a safe pad token) and the dataset
    load_trl_models                 policy, value model, reward model, as TRL takes them
    trl_lora_config, trl_ppo_args   LoRA and TRL's PPOConfig for our settings
    patched_trl(name=wrapper)       the one monkeypatch context: replaces functions of
                                    ``trl.experimental.ppo.ppo_trainer`` and always restores them
    train_trl(...)                  build the PPOTrainer inside that context and train it

Both callers change nothing of what TRL computes: ``bench`` wraps functions with timers,
``trl_compare`` routes the reward-model call to our reward function and records tensors.
"""

from __future__ import annotations

import shutil
import tempfile
from contextlib import contextmanager

TRL_VERSION = "1.12.0"


def require_trl():
    """Import trl and check it is 1.12.0; the error names the fix."""
    import trl

    if trl.__version__ != TRL_VERSION:
        raise RuntimeError(f"the TRL comparison needs trl=={TRL_VERSION} (its PPOTrainer was removed later); "
                           f"found {trl.__version__}. Fix: pip install 'trl=={TRL_VERSION}'")
    return trl


TRL_PAD_TOKEN = "<|endoftext|>"
"""The pad token TRL gets for SmolLM2. Its own pad token is <|im_end|>, the EOS that also closes
every chat turn inside a prompt; TRL builds attention masks as ``ids != pad_token_id``, so it
would mask those prompt tokens out. <|endoftext|> (id 0) never occurs in a chat prompt."""


def trl_tokenizer(folder):
    """The policy's tokenizer as TRL needs it: left padding, and ``TRL_PAD_TOKEN`` as the pad
    token when the vocabulary has it (SmolLM2 does)."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(folder)
    tokenizer.padding_side = "left"
    if TRL_PAD_TOKEN in tokenizer.get_vocab():
        tokenizer.pad_token = TRL_PAD_TOKEN
    return tokenizer


def trl_prompt_ids(tokenizer, prompts: list[str]) -> list[list[int]]:
    """Chat-rendered prompt token ids, one list per prompt: TRL's ``train_dataset`` column
    ``input_ids`` (TRL wants the prompts already tokenized). The same ids as our rollouts use
    (``rollout.render_prompts``, no extra special tokens). Raises if the pad token occurs inside
    a prompt, because TRL would then mask it out."""
    from course_utils.rollout import render_prompts

    ids = [tokenizer(text, add_special_tokens=False)["input_ids"] for text in render_prompts(tokenizer, prompts)]
    if any(tokenizer.pad_token_id in row for row in ids):
        raise RuntimeError(f"pad token {tokenizer.pad_token!r} occurs inside a prompt; TRL would mask it out. "
                           "Give TRL a pad token that never occurs in a prompt.")
    return ids


def load_trl_models(folder, tokenizer, dtype=None, reward_model: bool = True) -> tuple:
    """``(policy, value_model, reward_model)`` as TRL's PPOTrainer takes them, in float32 by default.

    policy: ``AutoModelForCausalLM`` (TRL wraps it with the LoRA config itself).
    value_model: ``AutoModelForSequenceClassification`` with ``num_labels=1`` on the same backbone:
        a separate, fully trainable copy with a randomly initialised score head.
    reward_model: the same kind of model (a random head: a stand-in for a trained reward model),
        or None when ``reward_model=False`` (the caller brings its own).
    """
    import torch
    from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification

    dtype = dtype or torch.float32
    policy = AutoModelForCausalLM.from_pretrained(folder, dtype=dtype)
    heads = [AutoModelForSequenceClassification.from_pretrained(folder, num_labels=1, dtype=dtype)
             for _ in range(2 if reward_model else 1)]
    for model in heads:
        model.config.pad_token_id = tokenizer.pad_token_id
    return policy, heads[0], heads[1] if reward_model else None


def trl_lora_config(rank: int, alpha: int, target_modules):
    """peft's LoraConfig for TRL's ``peft_config=`` (no dropout, no bias, causal LM)."""
    from peft import LoraConfig

    return LoraConfig(r=rank, lora_alpha=alpha, target_modules=list(target_modules), lora_dropout=0.0,
                      bias="none", task_type="CAUSAL_LM")


def trl_ppo_args(output_dir: str, *, seed: int, batch_size: int, num_minibatches: int, ppo_epochs: int,
                 total_updates: int, response_length: int, temperature: float, learning_rate: float,
                 kl_coef: float, stop_token: str | None = None, **extra):
    """TRL 1.12.0's ``PPOConfig`` for our settings, on the CPU in float32, with no saving,
    evaluation, sample printing or reporting. ``extra`` sets any other PPOConfig field.

    Batch sizes: TRL derives ``batch_size = per_device_train_batch_size x
    gradient_accumulation_steps x processes`` and splits it into ``num_mini_batches``
    minibatches. Its optimizer steps once every ``gradient_accumulation_steps`` micro-batches
    (accelerate's ``accumulate``; experimental/ppo/ppo_trainer.py, the local batch sizes and the
    epoch loop). An epoch holds ``num_mini_batches x ceil(gradient_accumulation_steps /
    num_mini_batches)`` micro-batches (a minibatch smaller than ``per_device_train_batch_size`` is
    one), ``max(gradient_accumulation_steps, num_mini_batches)`` when one of the two divides the other,
    so with accumulation >= ``num_mini_batches`` all the minibatches of an epoch merge into ONE
    step, and with fewer every ``gradient_accumulation_steps`` of them merge into one. Our trainer
    steps once per minibatch, so we set ``per_device_train_batch_size = batch_size`` and
    ``gradient_accumulation_steps = 1``: then each minibatch is one micro-batch and one step.
    """
    from trl.experimental.ppo import PPOConfig

    if batch_size % num_minibatches:
        raise ValueError(f"batch_size ({batch_size}) must be divisible by num_minibatches ({num_minibatches})")
    settings = dict(
        output_dir=output_dir, report_to=[], logging_steps=1, disable_tqdm=True, save_strategy="no",
        eval_strategy="no", use_cpu=True, bf16=False, fp16=False, gradient_checkpointing=False, seed=seed,
        per_device_train_batch_size=batch_size, gradient_accumulation_steps=1, num_mini_batches=num_minibatches,
        num_ppo_epochs=ppo_epochs, total_episodes=total_updates * batch_size,
        local_rollout_forward_batch_size=batch_size, response_length=response_length, temperature=temperature,
        learning_rate=learning_rate, kl_coef=kl_coef, num_sample_generations=0, stop_token=stop_token,
    )
    settings.update(extra)
    return PPOConfig(**settings)


@contextmanager
def patched_trl(**wrappers):
    """Replace functions of ``trl.experimental.ppo.ppo_trainer`` for the duration of a run.

    ``wrappers`` maps a module-level name (``batch_generation``, ``forward``, ``get_reward``,
    ``masked_whiten``...) to ``make(original) -> replacement``. The originals are put back on exit,
    even when training fails.
    """
    from trl.experimental.ppo import ppo_trainer as trl_ppo

    original = {name: getattr(trl_ppo, name) for name in wrappers}
    try:
        for name, make in wrappers.items():
            setattr(trl_ppo, name, make(original[name]))
        yield trl_ppo
    finally:
        for name, fn in original.items():
            setattr(trl_ppo, name, fn)


def train_trl(make_args, *, tokenizer, policy, value_model, reward_model, dataset, lora, callbacks,
              wrappers: dict | None = None, before_train=None) -> dict:
    """Build TRL's PPOTrainer (reference = the policy with its adapter off) and train it.

    ``make_args(output_dir)`` returns TRL's PPOConfig (a scratch folder, removed afterwards);
    ``wrappers`` go to ``patched_trl``; ``before_train(trainer)`` runs after construction and may
    return a cleanup function (called after training). Returns ``{"trainer", "args"}``.
    """
    from trl.experimental.ppo import PPOTrainer

    workdir = tempfile.mkdtemp(prefix="trl-run-")
    cleanup = None
    try:
        with patched_trl(**(wrappers or {})):
            args = make_args(workdir)
            trainer = PPOTrainer(args=args, processing_class=tokenizer, model=policy, ref_model=None,
                                 reward_model=reward_model, train_dataset=dataset, value_model=value_model,
                                 peft_config=lora, callbacks=callbacks)
            cleanup = before_train(trainer) if before_train else None
            trainer.train()
    finally:
        if cleanup:
            cleanup()
        shutil.rmtree(workdir, ignore_errors=True)
    return {"trainer": trainer, "args": args}
