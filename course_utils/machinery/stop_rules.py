"""When to stop a run: pure functions of the logged metrics and the config.

``check_update`` runs after every update, ``check_heldout`` after every evaluation. Both take the
running streaks (how many updates or evaluations in a row a rule has been broken) and return the
new ones, so a rule with a patience fires only when it keeps being broken. Lesson 8 fires each rule
on purpose.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np


@dataclass
class StopSignal:
    """Why a run stopped early: the rule's name and the numbers that tripped it."""

    rule: str
    message: str

    def __str__(self) -> str:
        return f"[{self.rule}] {self.message}"


@dataclass(frozen=True)
class Streaks:
    """Consecutive updates with non-finite values or a too-high clip fraction, and consecutive
    evaluations with the reward up but no held-out gain."""

    nonfinite: int = 0
    clipfrac: int = 0
    hacking: int = 0


def is_nonfinite(m: dict) -> bool:
    """The update saw a non-finite score or KL, or skipped a step for a non-finite loss/gradient."""
    return bool(m["nonfinite_steps"] or m["nonfinite_scores"] or m.get("nonfinite_kl", 0))


def check_update(m: dict, config, streaks: Streaks) -> tuple[StopSignal | None, Streaks]:
    """The first rule that the update with metrics ``m`` broke (with its numbers), or None."""
    nonfinite = streaks.nonfinite + 1 if is_nonfinite(m) else 0
    streaks = replace(streaks, nonfinite=nonfinite)
    if nonfinite >= config.stop_nonfinite_patience:
        return StopSignal("nonfinite", f"{nonfinite} updates in a row had non-finite values "
                          f"(scores: {m['nonfinite_scores']}, KL tokens: {m.get('nonfinite_kl', 0)}, "
                          f"skipped steps: {m['nonfinite_steps']})"), streaks
    if nonfinite:
        return None, streaks  # the other statistics of this update are not meaningful
    # An update whose KL early stop fired before its first step measured no step statistics (value
    # loss, entropy, clip fraction: NaN). That is no evidence of a fault: their rules skip it.
    stepped = bool(m.get("optimizer_steps", 1))
    if stepped and m["value_loss"] > config.stop_max_value_loss:
        return StopSignal("value_divergence", f"value loss {m['value_loss']:.3g} > {config.stop_max_value_loss}"), streaks
    if m["kl_per_sequence"] > config.stop_max_kl:
        return StopSignal("kl_too_high", f"KL per response {m['kl_per_sequence']:.3g} nats > {config.stop_max_kl}"), streaks
    if stepped and not config.stop_min_entropy <= m["entropy"] <= config.stop_max_entropy:
        return StopSignal("entropy_out_of_range", f"entropy {m['entropy']:.3g} outside "
                          f"[{config.stop_min_entropy}, {config.stop_max_entropy}]"), streaks
    if m["answer_length"] < config.stop_min_length:
        return StopSignal("length_collapse", f"mean answer length {m['answer_length']:.2f} tokens "
                          f"(EOS not counted) < {config.stop_min_length}"), streaks
    if not stepped:
        return None, streaks  # the clip-fraction streak neither grows nor breaks
    clipfrac = streaks.clipfrac + 1 if m["policy_clipfrac"] > config.stop_max_clipfrac else 0
    streaks = replace(streaks, clipfrac=clipfrac)
    if clipfrac >= config.stop_clipfrac_patience:
        return StopSignal("clipfrac_too_high", f"policy clip fraction {m['policy_clipfrac']:.2f} > "
                          f"{config.stop_max_clipfrac} for {clipfrac} updates"), streaks
    return None, streaks


def target_pass_rate(evaluation: dict) -> float:
    """The held-out pass rate of what is trained: ``pass_rate_trained`` when the evaluation also covers
    families that are not trained (``eval_families``), else ``pass_rate``."""
    return evaluation.get("pass_rate_trained", evaluation["pass_rate"])


def check_heldout(history: list[dict], evals: list[dict], config, streaks: Streaks) -> tuple[StopSignal | None, Streaks]:
    """Reward up while the held-out pass rate does not improve: the reward is being gamed.

    ``history`` holds the per-update metrics (``score`` is read), ``evals`` the evaluations so far
    (``pass_rate`` is read; the last one is the newest)."""
    if config.stop_hacking_patience <= 0 or len(evals) < 2:
        return None, streaks
    # Only the trained families' pass rate: forgetting on the others is not the reward being gamed.
    best_before = max(target_pass_rate(e) for e in evals[:-1])
    recent = [h["score"] for h in history[-config.eval_every:]]
    early = [h["score"] for h in history[:config.eval_every]]
    reward_rose = np.mean(recent) > np.mean(early)
    hacking = streaks.hacking + 1 if reward_rose and target_pass_rate(evals[-1]) <= best_before else 0
    streaks = replace(streaks, hacking=hacking)
    if hacking >= config.stop_hacking_patience:
        return StopSignal("reward_without_heldout_gain",
                          f"training score rose {np.mean(early):.3f} -> {np.mean(recent):.3f} but held-out pass "
                          f"rate {target_pass_rate(evals[-1]):.2f} has not beaten {best_before:.2f} "
                          f"for {hacking} evaluations"), streaks
    return None, streaks
