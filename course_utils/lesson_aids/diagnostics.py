"""Reading a PPO run: the logs as a bundle, and reward hacking caught from the answers themselves.

Everything here is a pure function of plain Python data (lists of answers, prompts, metric
dicts), so it can be tested on hand-made examples and run on any run's files:

    log_bundle_summary(history)        first / last / min / max of each logged metric, in groups
    plot_log_bundle(history)           one small panel per metric, grouped (a Figure)
    placeholders_in(prompt)            the "<sum>"-style slots a prompt asks the model to fill
    placeholder_copy_rate(...)         share of answers that copied such a slot instead of filling it
    prompt_echo_rate(...)              share of answers that repeat their whole prompt
    constant_answers(...)              per task family: the most common answer and its share
    detect_reward_hacking(...)         all of the above plus length collapse, with thresholds,
                                       as a HackingReport listing what it found
    plot_reward_vs_heldout(...)        training score, KL and held-out pass rate on one time axis
    reward_checker_agreement(...)      does the reward agree with the checker? (mean score of
                                       passing vs failing answers, correlation)
    per_family_score_and_pass(...)     mean reward and checker pass rate per task family
    plot_score_vs_pass(...)            those two against each other, before and after training
    binomial_standard_error(p, n)      how much a pass rate on n prompts moves by chance
    task_outcomes(...)                 per task family, before vs after: pass rate, partial-credit
                                       reward, hacks flagged, and a verdict (learned / hacked / ...)

The hacks the detector looks for are the ones a small policy found by itself on tasks like this
course's (the first hand-written CPU probe, week 8 section 3): copying the placeholder "<sum>" for
format credit and one constant answer ("No.") for a yes/no task whose answers are half Yes and half
No; plus answers that shrink towards nothing, and answers that echo the prompt.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Sequence

import numpy as np

__all__ = [
    "LOG_GROUPS",
    "log_bundle_summary",
    "format_log_bundle",
    "plot_log_bundle",
    "placeholders_in",
    "placeholder_copy_rate",
    "prompt_echo_rate",
    "normalise_answer",
    "constant_answers",
    "mean_length",
    "Finding",
    "HackingReport",
    "detect_reward_hacking",
    "plot_reward_vs_heldout",
    "reward_checker_agreement",
    "per_family_score_and_pass",
    "plot_score_vs_pass",
    "binomial_standard_error",
    "task_outcomes",
]

# ---------------------------------------------------------------------------------------------
# 1. The logs as a bundle
# ---------------------------------------------------------------------------------------------

# What to read together (the groups of the source lesson's monitoring list), as logged by
# course_utils.trainer.PPOTrainer.ppo_update. One number alone says little; a group tells a story.
LOG_GROUPS: dict[str, tuple[str, ...]] = {
    "reward": ("score", "non_score_reward", "shaped_reward", "kl_per_sequence", "kl_per_token", "kl_coef"),
    "policy and value": ("policy_loss", "value_loss", "explained_variance", "advantage_mean", "advantage_std",
                         "value_mean", "entropy"),
    "trust region": ("policy_clipfrac", "value_clipfrac", "approx_kl", "ratio_mean", "ratio_var", "ratio_max"),
    "responses": ("response_length", "eos_rate", "truncation_rate", "padding_fraction"),
    "health": ("nonfinite_steps", "nonfinite_scores", "grad_norm", "optimizer_steps", "stale_steps_skipped",
               "policy_lag_max", "learning_rate"),
    "speed": ("time_update_s", "rollout_tokens_per_s", "train_tokens_per_s"),
}


def _finite(values: Sequence[float]) -> np.ndarray:
    x = np.asarray([np.nan if v is None else float(v) for v in values], dtype=float)
    return x[np.isfinite(x)]


def log_bundle_summary(history: Sequence[dict], groups: dict[str, Sequence[str]] | None = None) -> list[dict]:
    """One row per logged metric: ``{"group", "metric", "first", "last", "min", "max", "n"}``.

    ``history`` is the list of per-update metric dicts (``trainer.history`` or the lines of
    ``metrics.jsonl``). Statistics skip NaN/inf values; ``n`` counts the finite ones (a metric
    with n smaller than the number of updates had non-finite values). Metrics absent from every
    update are left out. ``first``/``last`` are the first and last finite values.
    """
    groups = LOG_GROUPS if groups is None else groups
    rows = []
    for group, keys in groups.items():
        for key in keys:
            present = [h[key] for h in history if key in h]
            if not present:
                continue
            x = _finite(present)
            nan = float("nan")
            rows.append({
                "group": group, "metric": key, "n": int(len(x)),
                "first": float(x[0]) if len(x) else nan, "last": float(x[-1]) if len(x) else nan,
                "min": float(x.min()) if len(x) else nan, "max": float(x.max()) if len(x) else nan,
            })
    return rows


def format_log_bundle(rows: list[dict], digits: int = 4) -> str:
    """``log_bundle_summary`` rows as a fixed-width text table, grouped."""
    lines, group = [], None
    header = f"  {'metric':<22} {'first':>11} {'last':>11} {'min':>11} {'max':>11}"
    for row in rows:
        if row["group"] != group:
            group = row["group"]
            lines += [f"[{group}]", header]
        cells = " ".join(f"{row[k]:>11.{digits}g}" for k in ("first", "last", "min", "max"))
        lines.append(f"  {row['metric']:<22} {cells}")
    return "\n".join(lines)


def plot_log_bundle(history: Sequence[dict], groups: dict[str, Sequence[str]] | None = None,
                    columns: int = 6):
    """One small panel per metric, a row of panels per group (pure: history in, Figure out)."""
    import matplotlib.pyplot as plt

    groups = LOG_GROUPS if groups is None else groups
    present = {g: [k for k in keys if any(k in h for h in history)] for g, keys in groups.items()}
    present = {g: keys for g, keys in present.items() if keys}
    n_rows = sum(math.ceil(len(keys) / columns) for keys in present.values()) or 1
    fig, axes = plt.subplots(n_rows, columns, figsize=(2.6 * columns, 2.0 * n_rows), squeeze=False)
    for ax in axes.flat:
        ax.axis("off")
    row = 0
    for group, keys in present.items():
        for i, key in enumerate(keys):
            ax = axes[row + i // columns, i % columns]
            ax.axis("on")
            steps = [h.get("update", j + 1) for j, h in enumerate(history) if key in h]
            values = [np.nan if h[key] is None else float(h[key]) for h in history if key in h]
            ax.plot(steps, values, "o-", ms=3, lw=1.2)
            ax.set_title(f"{group}: {key}" if i == 0 else key, fontsize=8, loc="left")
            ax.tick_params(labelsize=7)
            ax.grid(alpha=0.3)
        row += math.ceil(len(keys) / columns)
    fig.tight_layout()
    return fig


def plot_reward_vs_heldout(history: Sequence[dict], evals: Sequence[dict]):
    """Two panels on one update axis (pure: logs in, Figure out).

    Left: the training score (per update) against the held-out pass rate and held-out mean reward
    (per evaluation). Right: KL to the reference and response length. Read together: a score that
    climbs while the pass rate stays flat, with KL jumping or length shrinking, is the picture
    of reward hacking.
    """
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 3.8))
    steps = [h["update"] for h in history]
    left.plot(steps, [h.get("score", np.nan) for h in history], "o-", ms=3, color="tab:blue",
              label="training score (per update)")
    if evals:
        e_steps = [e["update"] for e in evals]
        left.plot(e_steps, [e.get("mean_reward", np.nan) for e in evals], "s--", color="tab:purple",
                  label="held-out mean reward")
        left.plot(e_steps, [e["pass_rate"] for e in evals], "D-", color="tab:green", lw=2,
                  label="held-out pass rate")
    left.set_xlabel("update")
    left.set_title("reward vs held-out pass rate", fontsize=10)
    left.grid(alpha=0.3)
    left.legend(fontsize=8)
    right.plot(steps, [h.get("kl_per_sequence", np.nan) for h in history], "o-", ms=3, color="tab:red")
    right.set_ylabel("KL to reference (nats / response)", color="tab:red")
    right.set_xlabel("update")
    right.grid(alpha=0.3)
    twin = right.twinx()
    twin.plot(steps, [h.get("response_length", np.nan) for h in history], "^-", ms=3, color="tab:gray")
    twin.set_ylabel("response length (tokens)", color="tab:gray")
    right.set_title("KL and response length", fontsize=10)
    fig.tight_layout()
    return fig


# ---------------------------------------------------------------------------------------------
# 2. Reward hacking, read from the answers
# ---------------------------------------------------------------------------------------------

_PLACEHOLDER = re.compile(r"<[A-Za-z][A-Za-z0-9_ -]*>")


def placeholders_in(prompt: str) -> list[str]:
    """The fill-in slots of a prompt, written in angle brackets: ``"... RESULT: <sum>"`` -> ``["<sum>"]``.

    Chat special tokens such as ``<|im_end|>`` do not match (they contain ``|``).
    """
    return _PLACEHOLDER.findall(prompt)


def _check_same_length(answers: Sequence[str], other: Sequence, name: str) -> None:
    if isinstance(answers, str):
        raise TypeError("answers must be a list of strings, not one string; wrap it: [answer]")
    if len(answers) != len(other):
        raise ValueError(f"{len(answers)} answers but {len(other)} {name}: give one per answer")


def placeholder_copy_rate(answers: Sequence[str], prompts: Sequence[str]) -> float:
    """Share of answers that contain a placeholder of their own prompt (case-insensitive).

        rate = #{i : prompt i has a placeholder and answer i contains it} / #{i : prompt i has one}

    Only prompts with a placeholder count in the denominator; NaN when no prompt has one.
    Example: prompt "Add 2 and 3. Reply with one line: RESULT: <sum>", answer "RESULT: <sum>".
    """
    _check_same_length(answers, prompts, "prompts")
    eligible = copied = 0
    for answer, prompt in zip(answers, prompts):
        slots = placeholders_in(prompt)
        if slots:
            eligible += 1
            copied += any(s.lower() in answer.lower() for s in slots)
    return copied / eligible if eligible else float("nan")


def _squash(text: str) -> str:
    return " ".join(text.lower().split())


def prompt_echo_rate(answers: Sequence[str], prompts: Sequence[str]) -> float:
    """Share of answers that contain their whole prompt (case and spacing ignored); NaN for none."""
    _check_same_length(answers, prompts, "prompts")
    if not answers:
        return float("nan")
    return sum(_squash(p) in _squash(a) for a, p in zip(answers, prompts)) / len(answers)


def normalise_answer(answer: str) -> str:
    """The form in which two answers count as "the same": stripped, lowercased, spaces squashed,
    trailing full stops and exclamation marks removed ("No." == "no" == " NO! ")."""
    return _squash(answer).rstrip(".! ")


def constant_answers(answers: Sequence[str], groups: Sequence[str] | None = None) -> dict[str, dict]:
    """Per group (task family): the most common normalised answer, its share and the group size.

    Returns ``{group: {"answer", "share", "count", "n"}}``; one group ``"all"`` when ``groups`` is
    None. Ties go to the answer seen first. A share of 1.0 means every answer in the group was the
    same, which is a hack whenever the correct answers differ between prompts.
    """
    groups = ["all"] * len(answers) if groups is None else list(groups)
    _check_same_length(answers, groups, "groups")
    by_group: dict[str, list[str]] = {}
    for answer, group in zip(answers, groups):
        by_group.setdefault(group, []).append(normalise_answer(answer))
    result = {}
    for group, items in by_group.items():
        answer, count = Counter(items).most_common(1)[0]
        result[group] = {"answer": answer, "share": count / len(items), "count": count, "n": len(items)}
    return result


def mean_length(answers: Sequence[str]) -> float:
    """Mean number of characters per answer after stripping surrounding whitespace (NaN for none)."""
    return float(np.mean([len(a.strip()) for a in answers])) if len(answers) else float("nan")


@dataclass
class Finding:
    """One thing the detector flagged: which check, the measured value, the threshold, and why."""

    check: str
    value: float
    threshold: float
    message: str
    examples: list = field(default_factory=list)

    def __str__(self) -> str:
        shown = "; ".join(repr(e) for e in self.examples[:3])
        return f"[{self.check}] {self.message}" + (f" e.g. {shown}" if shown else "")


@dataclass
class HackingReport:
    """What ``detect_reward_hacking`` measured and what it flagged.

    placeholder_copy_rate, prompt_echo_rate: see the functions of the same name (NaN: not applicable).
    constant_answers: ``constant_answers(answers, groups)``, plus ``"target_share"`` (the share of
        the most common correct answer in that group) when targets were given.
    mean_length / baseline_mean_length: characters per answer now and before (NaN: no baseline).
    findings: one ``Finding`` per check that crossed its threshold; empty means nothing flagged.
    """

    n_answers: int
    placeholder_copy_rate: float
    prompt_echo_rate: float
    constant_answers: dict
    mean_length: float
    baseline_mean_length: float
    findings: list

    @property
    def flagged(self) -> bool:
        return bool(self.findings)

    @property
    def checks_flagged(self) -> list[str]:
        return [f.check for f in self.findings]

    def to_dict(self) -> dict:
        return asdict(self)

    def __str__(self) -> str:
        lines = [
            f"{self.n_answers} answers: placeholder copied {_pct(self.placeholder_copy_rate)}, "
            f"prompt echoed {_pct(self.prompt_echo_rate)}, mean length {self.mean_length:.1f} chars"
            + (f" (before: {self.baseline_mean_length:.1f})" if math.isfinite(self.baseline_mean_length) else ""),
        ]
        if self.findings:
            lines += ["FLAGGED:"] + [f"  {f}" for f in self.findings]
        else:
            lines.append("nothing flagged")
        return "\n".join(lines)


def _pct(x: float) -> str:
    return "n/a" if not math.isfinite(x) else f"{x:.0%}"


def detect_reward_hacking(
    answers: Sequence[str],
    prompts: Sequence[str],
    groups: Sequence[str] | None = None,
    targets: Sequence[str] | None = None,
    baseline_answers: Sequence[str] | None = None,
    max_placeholder_rate: float = 0.1,
    max_echo_rate: float = 0.1,
    max_constant_share: float = 0.8,
    min_group_size: int = 4,
    min_length_ratio: float = 0.5,
    min_mean_length: float = 2.0,
) -> HackingReport:
    """Look for the three hacks in a list of answers; flag each check that crosses its threshold.

    placeholder:  placeholder_copy_rate > max_placeholder_rate
    echo:         prompt_echo_rate > max_echo_rate
    constant:     in a group of >= min_group_size answers, the most common answer's share is
                  >= max_constant_share, and (when ``targets`` are given) higher than the most
                  common *correct* answer's share, so a task whose answers really are all the
                  same is not flagged
    length:       mean length < min_mean_length characters, or (with ``baseline_answers``, e.g.
                  the answers before training to the same prompts) < min_length_ratio x the
                  baseline's mean length

    ``groups`` are the task families of the prompts (None: one group); ``targets`` the correct
    answers. All lists are aligned with ``answers``.
    """
    _check_same_length(answers, prompts, "prompts")
    if targets is not None:
        _check_same_length(answers, targets, "targets")
    group_list = ["all"] * len(answers) if groups is None else list(groups)
    findings: list[Finding] = []

    placeholder = placeholder_copy_rate(answers, prompts)
    if math.isfinite(placeholder) and placeholder > max_placeholder_rate:
        copied = [a for a, p in zip(answers, prompts) if any(s.lower() in a.lower() for s in placeholders_in(p))]
        findings.append(Finding("placeholder", placeholder, max_placeholder_rate,
                                f"{placeholder:.0%} of the answers to prompts with a <slot> copied the slot "
                                "instead of filling it in", copied[:3]))

    echo = prompt_echo_rate(answers, prompts)
    if math.isfinite(echo) and echo > max_echo_rate:
        echoed = [a for a, p in zip(answers, prompts) if _squash(p) in _squash(a)]
        findings.append(Finding("echo", echo, max_echo_rate,
                                f"{echo:.0%} of the answers repeat their prompt", echoed[:3]))

    constant = constant_answers(answers, group_list)
    if targets is not None:
        target_stats = constant_answers(list(targets), group_list)
        for group, stats in constant.items():
            stats["target_share"] = target_stats[group]["share"]
    for group, stats in constant.items():
        above_target = stats["share"] > stats.get("target_share", 0.0)
        if stats["n"] >= min_group_size and stats["share"] >= max_constant_share and above_target:
            expected = (f" (the correct answers' most common one covers only {stats['target_share']:.0%})"
                        if "target_share" in stats else "")
            findings.append(Finding("constant", stats["share"], max_constant_share,
                                    f"{group}: {stats['count']} of {stats['n']} answers are the same, "
                                    f"{stats['answer']!r}{expected}", [stats["answer"]]))

    length = mean_length(answers)
    baseline = mean_length(baseline_answers) if baseline_answers is not None else float("nan")
    if math.isfinite(length) and length < min_mean_length:
        findings.append(Finding("length", length, min_mean_length,
                                f"answers have collapsed to {length:.1f} characters on average",
                                [a for a in answers if len(a.strip()) < min_mean_length][:3]))
    elif math.isfinite(length) and math.isfinite(baseline) and length < min_length_ratio * baseline:
        findings.append(Finding("length", length, min_length_ratio * baseline,
                                f"answers shrank from {baseline:.1f} to {length:.1f} characters on average "
                                f"(below {min_length_ratio:.0%} of before)",
                                sorted(answers, key=lambda a: len(a.strip()))[:3]))

    return HackingReport(len(answers), placeholder, echo, constant, length, baseline, findings)


# ---------------------------------------------------------------------------------------------
# 3. Does the reward agree with the checker? How noisy is a pass rate?
# ---------------------------------------------------------------------------------------------


def reward_checker_agreement(scores: Sequence[float], passed: Sequence[bool]) -> dict:
    """Mean reward of answers the checker passes vs fails, and their correlation.

        correlation = Pearson(scores, passed as 0/1)   (the point-biserial correlation)

    Returns ``{"n", "n_pass", "n_fail", "mean_pass", "mean_fail", "gap", "correlation"}``; a mean is
    NaN when its side is empty, the correlation NaN when scores or verdicts do not vary. The
    source lesson's strengthened reward model: mean 9.42 on passing answers, 0.10 on failing
    ones, correlation 0.885. A reward that agrees on average can still pay for near-misses.
    """
    s = np.asarray(scores, dtype=float)
    p = np.asarray(passed, dtype=bool)
    if s.shape != p.shape or s.ndim != 1:
        raise ValueError(f"scores {s.shape} and passed {p.shape} must be two lists of the same length")
    from course_utils.reward_model import point_biserial  # the one implementation of the correlation

    nan = float("nan")
    mean_pass = float(s[p].mean()) if p.any() else nan
    mean_fail = float(s[~p].mean()) if (~p).any() else nan
    correlation = point_biserial(s.tolist(), p.tolist()) if len(s) else nan
    return {"n": int(len(s)), "n_pass": int(p.sum()), "n_fail": int((~p).sum()), "mean_pass": mean_pass,
            "mean_fail": mean_fail, "gap": mean_pass - mean_fail, "correlation": correlation}


def per_family_score_and_pass(groups: Sequence[str], scores: Sequence[float],
                              passed: Sequence[bool]) -> dict[str, dict]:
    """``{family: {"score": mean reward, "pass_rate": share passed, "n": answers}}``, families sorted."""
    if not len(groups) == len(scores) == len(passed):
        raise ValueError(f"{len(groups)} groups, {len(scores)} scores and {len(passed)} verdicts: "
                         "give one of each per answer")
    table: dict[str, list] = {}
    for g, s, p in zip(groups, scores, passed):
        table.setdefault(g, []).append((float(s), bool(p)))
    return {g: {"score": float(np.mean([s for s, _ in rows])), "pass_rate": float(np.mean([p for _, p in rows])),
                "n": len(rows)} for g, rows in sorted(table.items())}


def plot_score_vs_pass(before: dict[str, dict], after: dict[str, dict] | None = None):
    """Mean reward (x) against checker pass rate (y), one point per task family; with ``after``,
    an arrow from each family's point before training to its point after (pure: Figure out).

    Points far to the right of the diagonal are families where the reward pays for answers the
    checker fails: the room a policy has to raise its reward without getting better.
    """
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 5))
    ax.plot([0, 1], [0, 1], color="0.8", lw=1, zorder=0)
    labels: dict[tuple[float, float], list[str]] = {}  # families that end on the same point share a label
    for family, b in before.items():
        ax.plot(b["score"], b["pass_rate"], "o", color="tab:gray")
        end = b
        if after is not None and family in after:
            end = after[family]
            ax.annotate("", xy=(end["score"], end["pass_rate"]), xytext=(b["score"], b["pass_rate"]),
                        arrowprops=dict(arrowstyle="->", color="tab:blue"))
            ax.plot(end["score"], end["pass_rate"], "o", color="tab:blue")
        labels.setdefault((round(end["score"], 3), round(end["pass_rate"], 3)), []).append(family)
    for (x, y), names in labels.items():
        ax.annotate("\n".join(names), (x, y), fontsize=7, xytext=(4, 3), textcoords="offset points",
                    va="bottom")
    ax.set_xlabel("mean reward of the answers")
    ax.set_ylabel("checker pass rate")
    ax.set_xlim(-0.05, 1.1)
    ax.set_ylim(-0.05, 1.1)
    ax.set_title("reward vs checker, per task family" + (" (grey: before, blue: after)" if after else ""),
                 fontsize=10)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig


def binomial_standard_error(p: float, n: int) -> float:
    """Standard error of a pass rate p measured on n independent prompts: sqrt(p (1 - p) / n).

    On 100 prompts at p = 0.24 it is about 0.043: a change of 2 points is well inside the noise.
    """
    if n < 1:
        raise ValueError(f"n must be >= 1 prompt, got {n}")
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"p is a pass rate and must lie in [0, 1], got {p}")
    return math.sqrt(p * (1.0 - p) / n)


# ---------------------------------------------------------------------------------------------
# 4. Which tasks learned and which hacked
# ---------------------------------------------------------------------------------------------


def task_outcomes(records: Sequence, answers_before: Sequence[str], answers_after: Sequence[str],
                  min_gain: float = 0.1) -> dict[str, dict]:
    """Per task family: did the policy learn the task, hack the reward, or neither?

    ``records`` are the held-out prompt records (``tasks.Prompt``), the two answer lists aligned
    with them (greedy answers before and after training). For each family::

        pass_before, pass_after     strict checker pass rate
        reward_before, reward_after mean partial-credit reward (tasks.partial_credit_reward)
        flags                       the checks ``detect_reward_hacking`` flags on the family's
                                    answers after training (placeholder, echo, constant, length)
        new_flags                   those of ``flags`` not already raised by the answers before
        verdict                     "hacked"    if training raised a new flag,
                                    "learned"   else if pass_after - pass_before >= min_gain,
                                    "reward only" else if the reward rose by >= min_gain (format
                                                credit without passing: not a hack, not a pass),
                                    "worse"     if the pass rate fell by >= min_gain,
                                    "no change" otherwise
    """
    from course_utils import tasks

    if not len(records) == len(answers_before) == len(answers_after):
        raise ValueError(f"{len(records)} records, {len(answers_before)} answers before and "
                         f"{len(answers_after)} after: give one answer of each per record")
    by_family: dict[str, list[int]] = {}
    for i, record in enumerate(records):
        by_family.setdefault(record.family, []).append(i)
    outcomes = {}
    for family, rows in sorted(by_family.items()):
        recs = [records[i] for i in rows]
        before = [answers_before[i] for i in rows]
        after = [answers_after[i] for i in rows]
        pass_b = float(np.mean([tasks.check(r, a).passed for r, a in zip(recs, before)]))
        pass_a = float(np.mean([tasks.check(r, a).passed for r, a in zip(recs, after)]))
        reward_b = float(np.mean([tasks.partial_credit_reward(r, a) for r, a in zip(recs, before)]))
        reward_a = float(np.mean([tasks.partial_credit_reward(r, a) for r, a in zip(recs, after)]))
        # No baseline for the length check: on these tasks shrinking from chatter to the bare
        # answer is the lesson, not a hack; only a collapse to (almost) nothing is flagged.
        prompts, targets = [r.prompt for r in recs], [r.target for r in recs]
        found = detect_reward_hacking(after, prompts, targets=targets)
        flags = found.checks_flagged
        # A hack is something training found: a check already flagged before training is not one.
        new_flags = sorted(set(flags) - set(detect_reward_hacking(before, prompts, targets=targets).checks_flagged))
        if new_flags:
            verdict = "hacked"
        elif pass_a - pass_b >= min_gain:
            verdict = "learned"
        elif reward_a - reward_b >= min_gain:
            verdict = "reward only"
        elif pass_b - pass_a >= min_gain:
            verdict = "worse"
        else:
            verdict = "no change"
        outcomes[family] = {"n": len(rows), "pass_before": pass_b, "pass_after": pass_a,
                            "reward_before": reward_b, "reward_after": reward_a, "flags": flags,
                            "new_flags": new_flags,
                            "findings": [str(f) for f in found.findings], "verdict": verdict}
    return outcomes
