"""What a finished run's policy does when it samples: pass@1, pass@k and token entropy.

Lesson 11's design 1 (``runs/example/designs/PREREGISTERED.md``) reads each arm's final policy, and
the shared start, on the validation split at temperature 1, besides the greedy pass rates the runs
record themselves:

    pass@1, pass@k   k answers per prompt; the unbiased estimate from c passes in n = k samples
                     (``sft.pass_at_k``): pass@1 is what the policy does on average, pass@k what it
                     can do at all
    entropy          the policy's mean per-token entropy over those sampled answers, in nats,

                         H = masked_mean( -Σ_v p(v | s_t) log p(v | s_t) )   over every answer token

                     (``ppo_math.entropy_from_logits``): a policy trained only on its own successes
                     is expected to narrow (lower H, lower pass@k at equal pass@1)

``python -m course_utils measure RUN_DIR ...`` writes ``sampled_<split>.json`` into each run folder
(an SFT run's ``model/`` or a PPO run's last checkpoint) and prints the overall numbers.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import torch

from course_utils import ppo_math as pm
from course_utils import tasks
from course_utils.rollout import ANSWER_CHUNK, SamplingSettings, decode_responses, generate, sequence_forward
from course_utils.sft import pass_at_k


def sampled_measures(bundle, records: list, samples: int = 16, max_new_tokens: int = 16, temperature: float = 1.0,
                     seed: int = 0, chunk: int = ANSWER_CHUNK) -> dict:
    """pass@1, pass@``samples`` and the mean token entropy of ``samples`` answers per record, sampled
    at ``temperature``, overall and per family. The answers are drawn exactly as
    ``sft.sampled_pass_rates`` draws them (the same chunks and seeds), so the pass rates agree with
    it; the entropy is read from one extra forward over each chunk's answers."""
    if samples < 1:
        raise ValueError(f"samples must be >= 1, got {samples}")
    policy, tokenizer = bundle.policy, bundle.tokenizer
    settings = SamplingSettings(temperature=temperature, max_new_tokens=max_new_tokens, do_sample=True)
    repeated = [r for r in records for _ in range(samples)]
    answers, entropy_sum, tokens = [], {}, {}
    for i in range(0, len(repeated), chunk):
        part = repeated[i:i + chunk]
        rollout = generate(policy, tokenizer, prompts=[r.prompt for r in part], settings=settings, seed=seed + i)
        answers.extend(decode_responses(tokenizer, rollout.response_ids, rollout.response_mask))
        policy.eval()
        with torch.no_grad():
            _, _, logits = sequence_forward(policy, rollout.query_ids, rollout.query_mask, rollout.response_ids,
                                            rollout.response_mask)
            per_token = pm.entropy_from_logits(logits, temperature) * rollout.response_mask
        for record, h, n in zip(part, per_token.sum(1).tolist(), rollout.response_mask.sum(1).tolist()):
            entropy_sum[record.family] = entropy_sum.get(record.family, 0.0) + h
            tokens[record.family] = tokens.get(record.family, 0.0) + n
    per_family: dict[str, list[tuple[float, float]]] = {}
    for j, record in enumerate(records):
        c = sum(tasks.check(record, a).passed for a in answers[j * samples:(j + 1) * samples])
        per_family.setdefault(record.family, []).append((pass_at_k(samples, c, 1), pass_at_k(samples, c, samples)))
    every = [pair for pairs in per_family.values() for pair in pairs]
    return {"k": samples, "temperature": temperature, "seed": seed, "prompts": len(records),
            "pass_at_1": float(np.mean([a for a, _ in every])), "pass_at_k": float(np.mean([b for _, b in every])),
            "entropy": sum(entropy_sum.values()) / max(sum(tokens.values()), 1.0),
            "per_family": {f: {"pass_at_1": float(np.mean([a for a, _ in v])),
                               "pass_at_k": float(np.mean([b for _, b in v])),
                               "entropy": entropy_sum[f] / max(tokens[f], 1.0)}
                           for f, v in sorted(per_family.items())}}


def final_bundle(run_dir: Path):
    """``(bundle, seed)`` of a finished run: an SFT run's saved ``model/``, or a PPO run's last
    checkpoint on top of its starting model."""
    run_dir = Path(run_dir)
    if (run_dir / "model" / "config.json").is_file() and (run_dir / "metrics.json").is_file():
        from course_utils import models

        seed = json.loads((run_dir / "metrics.json").read_text())["config"]["seed"]
        return models.load_bundle(run_dir / "model", device="cpu", seed=seed), seed
    if (run_dir / "config.json").is_file():
        from course_utils.config import PPOConfig
        from course_utils.trainer import PPOTrainer

        trainer = PPOTrainer(PPOConfig(**json.loads((run_dir / "config.json").read_text())), quiet=True)
        if not trainer.load_checkpoint():
            raise FileNotFoundError(f"{run_dir} holds no checkpoint: measure a finished PPO run")
        return trainer.bundle, trainer.config.seed
    raise FileNotFoundError(f"{run_dir} is neither an SFT run (model/ and metrics.json) nor a PPO run (config.json)")


def main(argv: list[str] | None = None) -> dict:
    """``python -m course_utils measure RUN_DIR ...``: pass@1, pass@k and entropy of each run's final
    policy, written to ``RUN_DIR/sampled_<split>.json``."""
    from course_utils.machinery import safe_files
    from course_utils.trainer import balanced_subset

    parser = argparse.ArgumentParser(prog="python -m course_utils measure", description=__doc__.split("\n")[0])
    parser.add_argument("runs", nargs="+", metavar="RUN_DIR", help="finished SFT or PPO run folders")
    parser.add_argument("--split", default="validation", choices=[*tasks.SPLITS[1:], tasks.UNSEEN_SPLIT],
                        help="held-out split (default: validation; the test split decides nothing here)")
    parser.add_argument("--prompts", type=int, default=100, help="prompts, balanced over families (default: 100)")
    parser.add_argument("--samples", type=int, default=16, help="answers per prompt, k (default: 16)")
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=None, help="sampling seed (default: the run's own seed)")
    args = parser.parse_args(argv)
    if args.samples < 1 or args.prompts < 1 or args.temperature <= 0:
        raise ValueError("--samples and --prompts must be >= 1 and --temperature > 0")
    records = balanced_subset(tasks.load_split(args.split), args.prompts)
    results = {}
    for run_dir in map(Path, args.runs):
        bundle, seed = final_bundle(run_dir)
        result = sampled_measures(bundle, records, args.samples, temperature=args.temperature,
                                  seed=seed if args.seed is None else args.seed)
        safe_files.write_json(run_dir / f"sampled_{args.split}.json", result)
        print(f"{run_dir}: pass@1 {result['pass_at_1']:.1%}, pass@{args.samples} {result['pass_at_k']:.1%}, "
              f"entropy {result['entropy']:.3f} nats per token ({args.split}, {len(records)} prompts)")
        results[str(run_dir)] = result
    return results
