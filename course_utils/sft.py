"""The SFT warm-up: a short LoRA fine-tune on gold answers, the first stage of RLHF.

PPO can only re-weight what the policy already samples: a task the model never answers right
gives PPO nothing to reinforce (the signal per prompt scales with p(1 - p)). So the pipeline
starts with supervised fine-tuning on demonstrations, sized as a warm-up that leaves PPO room:

    demonstrations   (prompt, gold answer) of the TRAIN split only, shuffled
    loss             -mean log π(answer token | prompt, answer so far) over the response mask:
                     the same mask as PPO's (answer tokens and the EOS, never the prompt)
    output           the LoRA update folded into the weights and saved as a model folder; PPO
                     loads it as its starting policy AND as its reference (a fresh PPO adapter on
                     top, switched off for the reference), so the KL anchor is the SFT model

``python -m course_utils sft`` runs it and writes ``runs/<run_name>/`` with ``model/``, ``report.md``,
``metrics.json`` and ``loss.png``.
"""

from __future__ import annotations

import argparse
import math
import random
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm

from course_utils import models, tasks
from course_utils import ppo_math as pm
from course_utils.config import field_docs
from course_utils.device import pick_device, seed_everything, set_threads
from course_utils.rollout import (greedy_answers, response_mask_from_ids, sampled_answers, sequence_forward,
                                  stop_token_ids, tokenize_prompts)


@dataclass
class SFTConfig:
    run_name: str = "sft-cpu"
    """Name of the run; its outputs go to ``<output_dir>/<run_name>/`` (the model in ``model/``)."""
    output_dir: str = "runs"
    """Folder holding one sub-folder per run."""
    model: str = "smollm2-135m-instruct"
    """The model to warm up: a preset name, a hub id or a local folder."""
    demos: int = 200
    """How many train-split demonstrations to learn from, in one pass (a warm-up, not convergence)."""
    demo_families: list = field(default_factory=list)
    """Task families that have demonstrations (empty: all). The others get none: SFT never sees
    them, though they are still evaluated (the "tasks no demonstration covers" design of lesson 11)."""
    epochs: int = 1
    """Passes over the demonstrations (an upper bound when ``max_train_minutes`` is set)."""
    max_train_minutes: float = 0.0
    """Stop after the step that spends this many training minutes (0: no budget). With all 400
    demonstrations and many epochs this is the control arm "SFT for the whole budget"."""
    batch_size: int = 8
    """Demonstrations per optimizer step."""
    learning_rate: float = 2e-4
    """Adam learning rate of the LoRA matrices."""
    lora_rank: int = 16
    """LoRA rank (on every projection); folded into the weights at the end."""
    lora_alpha: int = 32
    """LoRA scaling numerator."""
    eval_split: str = "test"
    """Held-out split for the pass rate before and after (the same one PPO reports on)."""
    eval_prompts: int = 100
    """Held-out prompts evaluated before and after (balanced over the task families)."""
    max_new_tokens: int = 16
    """Longest greedy answer in the evaluation."""
    seed: int = 0
    """Seeds the shuffling of the demonstrations and the LoRA initialisation."""
    threads: int = 0
    """torch CPU threads; 0: $COURSE_THREADS or the number of cores (at most 8)."""
    device: str = "cpu"
    """Where to train ("auto" picks cuda, then mps, then cpu)."""

    def validate(self) -> "SFTConfig":
        problems = [message for ok, message in (
            (self.demos >= 1, f"demos must be >= 1, got {self.demos}"),
            (self.epochs >= 1, f"epochs must be >= 1, got {self.epochs}"),
            (self.max_train_minutes >= 0, f"max_train_minutes must be >= 0 (0 = no budget), got {self.max_train_minutes}"),
            (self.batch_size >= 1, f"batch_size must be >= 1, got {self.batch_size}"),
            (self.learning_rate > 0, f"learning_rate must be > 0, got {self.learning_rate}"),
            (self.lora_rank >= 1, f"lora_rank must be >= 1 (the warm-up is a LoRA fine-tune), got {self.lora_rank}"),
            (self.eval_split != "train", "eval_split must be a held-out split (validation or test), not train"),
            (not set(self.demo_families) - set(tasks.TASK_FAMILIES),
             f"demo_families has unknown families {sorted(set(self.demo_families) - set(tasks.TASK_FAMILIES))}; "
             f"choose from {', '.join(tasks.TASK_FAMILIES)}"),
        ) if not ok]
        if problems:
            raise ValueError("Invalid SFT config: " + "; ".join(problems) + ".")
        return self

    @property
    def run_dir(self) -> Path:
        return Path(self.output_dir) / self.run_name


def demonstrations(n: int, seed: int, families=()) -> list[tasks.Prompt]:
    """``n`` train-split records (of ``families`` only, if given), shuffled with ``seed`` (never
    validation or test)."""
    records = [r for r in tasks.load_split("train") if not families or r.family in families]
    random.Random(seed).shuffle(records)
    if n > len(records):
        which = f" of {', '.join(families)}" if families else ""
        raise ValueError(f"demos={n} but the train split has {len(records)} prompts{which}; use at most {len(records)}")
    return records[:n]


def demo_batch(tokenizer, records: list, eos_id: int, device) -> dict[str, torch.Tensor]:
    """Prompts (chat template, left padded) and gold answers + EOS (right padded with the pad id),
    with the response mask of PPO: 1 on the answer tokens up to and including the EOS."""
    query_ids, query_mask = tokenize_prompts(tokenizer, [r.prompt for r in records])
    answers = [tokenizer(r.target, add_special_tokens=False)["input_ids"] + [eos_id] for r in records]
    width = max(map(len, answers))
    response_ids = torch.full((len(answers), width), tokenizer.pad_token_id, dtype=torch.long)
    for row, ids in enumerate(answers):
        response_ids[row, :len(ids)] = torch.tensor(ids)
    mask = response_mask_from_ids(response_ids, eos_id)[0]
    return {"query_ids": query_ids.to(device), "query_mask": query_mask.to(device),
            "response_ids": response_ids.to(device), "response_mask": mask.to(device)}


def sft_loss(policy, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """Negative log-likelihood of the gold answers, averaged over the response tokens:

        loss = -masked_mean(log π(a_t | s_t), response_mask)

    Shapes: the batch's ``[B, Lq]`` prompts and ``[B, T]`` answers -> a scalar."""
    logprobs, _, _ = sequence_forward(policy, batch["query_ids"], batch["query_mask"], batch["response_ids"],
                                      batch["response_mask"], temperature=1.0)
    return -pm.masked_mean(logprobs, batch["response_mask"])


def pass_rates(bundle, records: list, max_new_tokens: int) -> dict:
    """Greedy held-out answers: strict checker pass rate overall and per task family."""
    answers = greedy_answers(bundle, [r.prompt for r in records], max_new_tokens)
    passed = [tasks.check(r, a).passed for r, a in zip(records, answers)]
    per_family: dict[str, list[bool]] = {}
    for record, ok in zip(records, passed):
        per_family.setdefault(record.family, []).append(ok)
    return {"pass_rate": float(np.mean(passed)),
            "per_family": {k: float(np.mean(v)) for k, v in sorted(per_family.items())}, "answers": answers}


def pass_at_k(n: int, c: int, k: int) -> float:
    """The unbiased pass@k estimate from n samples of which c passed (Chen et al. 2021):

        pass@k = 1 - C(n - c, k) / C(n, k)      (the chance that k of the n samples include a pass)

    With k = n it is 1 if any sample passed; with k = 1 it is c / n."""
    if not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError(f"need 0 <= c <= n and 1 <= k <= n, got n={n}, c={c}, k={k}")
    return 1.0 if n - c < k else 1.0 - math.comb(n - c, k) / math.comb(n, k)


def sampled_pass_rates(bundle, records: list, samples: int = 16, max_new_tokens: int = 16,
                       temperature: float = 1.0, seed: int = 0, progress: bool = False) -> dict:
    """pass@1 and pass@``samples`` of answers sampled at ``temperature``, overall and per family:
    pass@1 is what the policy does on average, pass@k what it can do at all. RL on the policy's
    own samples can move pass@1 towards pass@k, but a family with pass@k = 0 gives it nothing."""
    answers = sampled_answers(bundle, [r.prompt for r in records], samples, max_new_tokens, temperature,
                              seed=seed, progress=progress)
    per_family: dict[str, list[tuple[float, float]]] = {}
    for record, group in zip(records, answers):
        c = sum(tasks.check(record, a).passed for a in group)
        per_family.setdefault(record.family, []).append((pass_at_k(samples, c, 1), pass_at_k(samples, c, samples)))
    every = [pair for pairs in per_family.values() for pair in pairs]
    return {"k": samples, "temperature": temperature,
            "pass_at_1": float(np.mean([a for a, _ in every])), "pass_at_k": float(np.mean([b for _, b in every])),
            "per_family": {f: {"pass_at_1": float(np.mean([a for a, _ in v])), "pass_at_k": float(np.mean([b for _, b in v]))}
                           for f, v in sorted(per_family.items())}}


def train_sft(config: SFTConfig, progress: bool = True) -> dict:
    """Warm up ``config.model`` on demonstrations; save the merged model; return the metrics
    (``before``/``after``: the pass rates on ``eval_split`` and on its unseen phrasings)."""
    from course_utils.machinery import report
    from course_utils.trainer import balanced_subset

    config.validate()
    threads = set_threads(config.threads or None)
    seed_everything(config.seed)
    device = pick_device(config.device)
    lora = models.LoRASettings(rank=config.lora_rank, alpha=config.lora_alpha)
    bundle = models.load_bundle(config.model, lora=lora, device=device, seed=config.seed)
    policy, tokenizer = bundle.policy, bundle.tokenizer
    eos_id = stop_token_ids(tokenizer, policy.base_model)[0]
    held_out = {name: balanced_subset(tasks.load_split(name), config.eval_prompts)
                for name in (config.eval_split, tasks.UNSEEN_SPLIT)}  # the same prompts, asked anew
    before = {name: pass_rates(bundle, records, config.max_new_tokens) for name, records in held_out.items()}

    demos = demonstrations(config.demos, config.seed, config.demo_families)
    lora_params = [p for n, p in policy.lm.named_parameters() if p.requires_grad]
    optimizer = torch.optim.Adam(lora_params, lr=config.learning_rate)
    losses, start = [], time.perf_counter()
    steps = config.epochs * -(-len(demos) // config.batch_size)
    policy.train()
    budget = config.max_train_minutes * 60 or float("inf")
    # Under a time budget the number of steps is not known in advance: the bar counts without a total.
    with tqdm(total=None if config.max_train_minutes else steps, desc="SFT steps", disable=not progress) as bar:
        for epoch in range(config.epochs):
            if losses and time.perf_counter() - start >= budget:
                break
            order = demos if epoch == 0 else random.Random(f"{config.seed}-{epoch}").sample(demos, len(demos))
            for i in range(0, len(order), config.batch_size):
                if losses and time.perf_counter() - start >= budget:
                    break  # the budget is spent: stop after the step that spent it
                loss = sft_loss(policy, demo_batch(tokenizer, order[i:i + config.batch_size], eos_id, device))
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                optimizer.step()
                losses.append(loss.item())
                bar.update(1)
                bar.set_postfix(loss=f"{losses[-1]:.3f}")
    seconds = time.perf_counter() - start
    after = {name: pass_rates(bundle, records, config.max_new_tokens) for name, records in held_out.items()}
    metrics = {"config": asdict(config), "demos": len(demos), "steps": len(losses), "train_seconds": seconds,
               "epochs_done": len(losses) * config.batch_size / len(demos),
               "threads": threads, "loss": losses, "before": before, "after": after}
    save_merged(bundle, config.run_dir / "model")
    report.write_sft_report(config.run_dir, metrics)
    return metrics


def warm_start(config: SFTConfig, progress: bool = True) -> Path:
    """PPO's starting model, ``<output_dir>/<run_name>/model``: kept if that folder already holds
    a model (lesson 6a or ``make sft`` wrote it), trained first by ``train_sft`` if it does not."""
    folder = config.run_dir / "model"
    if not (folder / "config.json").is_file():
        print(f"No SFT model in {folder} yet: training the warm-up first ({config.demos} demonstrations).")
        train_sft(config, progress=progress)
    return folder


def save_merged(bundle, folder: Path) -> Path:
    """Fold the LoRA update into the weights (W <- W + (alpha/r) B A) and save a plain model
    folder with its tokenizer: PPO's starting policy and reference."""
    merged = bundle.policy.lm.merge_and_unload()
    folder.mkdir(parents=True, exist_ok=True)
    merged.save_pretrained(folder)
    bundle.tokenizer.save_pretrained(folder)
    return folder


def main(argv: list[str] | None = None) -> dict:
    """``python -m course_utils sft [--FIELD VALUE ...]``: every field of ``SFTConfig``."""
    parser = argparse.ArgumentParser(prog="python -m course_utils sft", description=__doc__.split("\n")[0])
    docs = field_docs(SFTConfig)
    for name, spec in SFTConfig.__dataclass_fields__.items():
        flag, doc = f"--{name.replace('_', '-')}", docs.get(name, "")
        if spec.default_factory is list:  # a list field: zero or more values after the flag
            parser.add_argument(flag, nargs="*", default=[], metavar="NAME", help=f"{doc} (default: none)")
        else:
            parser.add_argument(flag, type=type(spec.default), default=spec.default,
                                help=f"{doc} (default: {spec.default})")
    args = parser.parse_args(argv)
    config = SFTConfig(**{name: getattr(args, name) for name in SFTConfig.__dataclass_fields__})
    metrics = train_sft(config)
    for name in metrics["before"]:
        before, after = metrics["before"][name], metrics["after"][name]
        print(f"held-out pass rate ({name}): {before['pass_rate']:.0%} -> {after['pass_rate']:.0%}")
    print(f"{metrics['steps']} SFT steps on {metrics['demos']} demonstrations in {metrics['train_seconds']:.0f} s")
    print(f"model: {config.run_dir / 'model'}   report: {config.run_dir / 'report.md'}")
    return metrics

