"""Retention: what training on some tasks costs the others, and how far the policy moved.

Lesson 11's design (h) trains SFT and PPO on a subset of the task families from the same SFT
warm-up (π_start) and measures three things per run:

    gain      pass rate on the trained families, after minus before (points)
    change    pass rate on the other families, after minus before (negative: forgetting)
    KL        the forward KL from the start, KL(π_start ‖ π), on held-out prompts of each group

RL's Razor (Shenfeld, Pari and Agrawal 2025, arXiv 2509.04259) reports that forgetting tracks the
KL between the fine-tuned and the base policy measured on the new task, and calls it the forward
KL, E_x [KL(π_0(·|x) ‖ π(·|x))] with π_0 the base model: the expectation is under the START
policy's answers. (The direction is as the paper's summaries quote its definition; the equation
was not read from the paper itself here.) On-policy RL samples from the policy it changes, so the
answers it moves are the ones π_start already gives; SFT pulls towards the demonstrations' answers
wherever they lie. This module estimates that KL for a language model, whose answers are token
sequences: by the chain rule the KL between two sequence distributions is the expected sum of
per-position KLs along sequences drawn from the first,

    KL(π_start ‖ π)(x) = E_{y ~ π_start(·|x)} [ Σ_t KL(π_start(·|x, y_<t) ‖ π(·|x, y_<t)) ]

and each per-position KL is summed exactly over the vocabulary (``ppo_math.exact_kl``), so the
only sampling noise is in which prefixes y_<t are visited.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from course_utils import ppo_math as pm
from course_utils.rollout import SamplingSettings, generate, sequence_forward


def sequence_forward_kl(start_logits: torch.Tensor, logits: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """KL(π_start ‖ π) of each response, summed over its real positions:

        KL_b = Σ_t mask[b, t] · Σ_a π_start(a | s_t) (log π_start(a | s_t) - log π(a | s_t))

    with π = softmax(logits) at temperature 1. Over responses sampled from π_start its mean is an
    unbiased estimate of the sequence-level KL(π_start ‖ π) (the chain rule; a response cut at the
    token limit counts the positions it has: the KL of the truncated answers).

    Shapes: ``start_logits`` and ``logits`` ``[B, T, V]`` (the raw logits that predict each
    response token, as ``rollout.sequence_forward`` returns them), ``mask`` ``[B, T]`` -> ``[B]``.
    """
    start_logprobs = torch.log_softmax(start_logits.float(), dim=-1)
    logprobs = torch.log_softmax(logits.float(), dim=-1)
    return pm.exact_kl(start_logprobs, logprobs, mask).sum(-1)


@torch.no_grad()
def forward_kl_from_start(start, policy, tokenizer, prompts: Sequence[str], samples: int = 4,
                          max_new_tokens: int = 16, seed: int = 0, chunk: int = 16) -> dict:
    """Estimate KL(π_start ‖ π) on ``prompts``: ``samples`` answers per prompt sampled from ``start``
    at temperature 1, then both models' whole next-token distributions along each answer
    (``sequence_forward_kl``). ``start`` and ``policy`` are ``PolicyWithValue`` models sharing
    ``tokenizer`` (or ``ModelBundle`` s: their ``.policy`` is used). The same ``seed`` draws the same
    answers from the same start, so two runs from one warm-up are compared on the same answers.

    Returns ``kl_per_answer`` (nats, the mean over answers of the summed KL, with its standard
    error ``kl_per_answer_se`` over answers), ``kl_per_token`` (total KL / total real tokens),
    ``answers`` and ``tokens``.
    """
    start, policy = getattr(start, "policy", start), getattr(policy, "policy", policy)
    settings = SamplingSettings(temperature=1.0, max_new_tokens=max_new_tokens, do_sample=True)
    repeated = [p for p in prompts for _ in range(samples)]
    per_answer, tokens = [], 0
    for i in range(0, len(repeated), chunk):
        # Sampled with the packed CPU kernels (faster; the same distribution up to ~1e-4 in log-probs): the KL
        # itself is computed exactly by the two plain forwards along whatever answers are drawn.
        r = generate(start, tokenizer, repeated[i:i + chunk], settings, seed=seed + i)
        forwards = [sequence_forward(model, r.query_ids, r.query_mask, r.response_ids, r.response_mask)[2]
                    for model in (start, policy)]
        per_answer.append(sequence_forward_kl(*forwards, r.response_mask))
        tokens += r.num_tokens
    kl = torch.cat(per_answer).double().numpy()
    se = float(kl.std(ddof=1) / np.sqrt(len(kl))) if len(kl) > 1 else 0.0
    return {"kl_per_answer": float(kl.mean()), "kl_per_answer_se": se, "kl_per_token": float(kl.sum() / max(tokens, 1)),
            "answers": len(kl), "tokens": tokens}


def family_share(per_family: dict[str, float], families: Sequence[str]) -> float:
    """Pass rate in percent over ``families`` (each family has as many held-out prompts as the next)."""
    return 100 * float(np.mean([per_family[f] for f in families]))


def gain_and_change(before: dict[str, float], after: dict[str, float], trained: Sequence[str]) -> dict[str, float]:
    """Per-family pass rates (fractions) before and after training on ``trained`` -> the points gained
    on the trained families and the points changed on every other family of ``before``:

        gain   = share(after, trained) - share(before, trained)
        change = share(after, others)  - share(before, others)      (negative: forgotten)
    """
    missing = sorted(set(trained) - set(before))
    if missing:
        raise ValueError(f"no pass rate before training for the trained families {missing}")
    others = sorted(set(before) - set(trained))
    if not others:
        raise ValueError("every evaluated family is trained: nothing measures forgetting")
    return {"gain_trained": family_share(after, trained) - family_share(before, trained),
            "change_others": family_share(after, others) - family_share(before, others)}


def choose_trained_families(greedy: dict[str, float], pass_at_k: dict[str, float], closed_label=(), n: int = 4,
                            min_pass_at_k: float = 0.3) -> list[str]:
    """Design (h)'s trained families, from the warm-up's VALIDATION-split numbers by a rule fixed
    before they were read: up to ``n`` families both arms can move, at least 2.

    - not ``closed_label`` (answers from a few fixed labels, e.g. Yes/No): there pass@k counts
      lucky guesses (1 - (1 - 1/L)^k of a blind guesser), so it says nothing of what PPO can reach;
    - pass@k >= ``min_pass_at_k``: the checker pays PPO for something (a family never passed gives
      it nothing, lesson 6a; design (g) saw PPO learn families from pass@16 = 0.3);
    - the most room that sampling already reaches, pass@k - greedy, first (ties: by name), and
      only families with some room (pass@k > greedy).
    """
    eligible = [f for f in greedy if f not in closed_label and pass_at_k[f] >= min_pass_at_k and pass_at_k[f] > greedy[f]]
    if len(eligible) < 2:
        raise ValueError(f"only {len(eligible)} families pass the rule ({eligible}); at least 2 are needed")
    return sorted(sorted(eligible), key=lambda f: greedy[f] - pass_at_k[f])[:n]


def change_at_gain(curve: Sequence[dict], gain: float) -> float | None:
    """The change on the other families when a run's path first reaches ``gain`` points on the
    trained ones, linearly interpolated between the two evaluations around it (``curve``: points
    with ``gain_trained`` and ``change_others`` in run order, from the start at (0, 0)); None when
    the path never reaches it. Two arms read at the same gain compare forgetting at equal gain."""
    for a, b in zip(curve, curve[1:]):
        if a["gain_trained"] >= gain:
            return a["change_others"]
        if b["gain_trained"] >= gain:
            share = (gain - a["gain_trained"]) / (b["gain_trained"] - a["gain_trained"])
            return a["change_others"] + share * (b["change_others"] - a["change_others"])
    return curve[-1]["change_others"] if curve and curve[-1]["gain_trained"] >= gain else None
