"""Imperfect demonstrations, the way real labelers get answers wrong (lesson 11, design "noisy teacher").

SFT imitates its demonstrations, mistakes included: it cannot be better than its targets. A reward
(here the checker) can. To measure where that matters, a share of the gold answers is replaced by a
labeler's mistake before SFT sees them. The mistakes are the wrong answers the reward model's
preference pairs already use (``preference_pairs.wrong_answers``), restricted to four human kinds:

    kind of mistake     the pairs' kinds it draws from                       example
    constraint_missed   case_violation, code_fence, missing_brackets, ...    {"a": 1} -> ```json {...}```
    wrong_number        wrong_arithmetic, wrong_number, wrong_count, ...     RESULT: 64 -> RESULT: 66
    format_slip         spacing, trailing_punctuation, quoted, misspelled    RESULT: 64 -> RESULT:64
    extra_sentence      preamble, explanation                                Yes -> Sure! Here is the answer: Yes

Never a placeholder or an echo of the input: those are a model's failures, not a person's.

Two styles of noise, because they teach different things:

    "habit"   every noisy demonstration of a family makes the SAME mistake (one labeler habit per
              family, drawn once): past a rate of 1/2 the mistake becomes the most common answer,
              and greedy decoding of an SFT model follows the majority.
    "mixed"   each noisy demonstration makes a mistake of its own kind: the right answer stays
              the most common one long after the noise passes 1/2.

Which demonstrations are noisy is drawn once per (seed, rate): a given seed's noisy set at rate
0.5 contains its noisy set at rate 0.25, so a sweep over rates adds noise rather than redrawing it.
"""

from __future__ import annotations

import random
from dataclasses import replace

from course_utils import tasks
from course_utils.preference_pairs import wrong_answers

MISTAKE_KINDS: dict[str, tuple[str, ...]] = {
    "constraint_missed": ("case_violation", "code_fence", "missing_brackets", "wrong_brackets", "numbered_list",
                          "comma_separated", "reordered", "missing_item", "missing_key", "wrong_type"),
    "wrong_number": ("wrong_arithmetic", "wrong_number", "wrong_count", "wrong_value", "wrong_label"),
    "format_slip": ("spacing", "trailing_punctuation", "quoted", "misspelled", "invalid_json"),
    "extra_sentence": ("preamble", "explanation"),
}
"""The four kinds of labeler mistakes and the preference-pair kinds each one draws from."""

STYLES = ("habit", "mixed")


def labeler_mistakes(record: tasks.Prompt, seed: int = tasks.DEFAULT_SEED) -> dict[str, str]:
    """The wrong answers a person could plausibly write for ``record``: ``{pair kind: text}``, in
    the family's own order (every one fails ``tasks.check``)."""
    human = {kind for kinds in MISTAKE_KINDS.values() for kind in kinds}
    return {kind: text for kind, text in wrong_answers(record, seed).items() if kind in human}


def family_habit(family: str, seed: int) -> str:
    """The one mistake kind that family's noisy labelers always make (style "habit")."""
    example = next(r for r in tasks.load_split("train") if r.family == family)
    return random.Random(f"habit-{seed}-{family}").choice(sorted(labeler_mistakes(example)))


def noisy_demonstrations(records: list, rate: float, style: str = "habit", seed: int = 0) -> list[tasks.Prompt]:
    """``records`` with the target of a ``rate`` share of them (rounded per family, so every family
    has the same share) replaced by a labeler's mistake; the others keep their gold answer.

    Returns new records in the same order; a replaced record's ``meta`` gains ``"noise"`` (the
    mistake's kind) and ``"gold"`` (the answer it replaced): ``demonstration_passes`` is then False
    for exactly those records."""
    if not 0.0 <= rate <= 1.0:
        raise ValueError(f"the noise rate is a share of the demonstrations, in [0, 1]; got {rate}")
    if style not in STYLES:
        raise ValueError(f"unknown noise style {style!r}; choose one of {', '.join(STYLES)}")
    by_family: dict[str, list[int]] = {}
    for index, record in enumerate(records):
        by_family.setdefault(record.family, []).append(index)
    noisy: dict[int, str] = {}
    for family, indices in sorted(by_family.items()):
        order = sorted(indices, key=lambda i: random.Random(f"noise-{seed}-{records[i].id}").random())
        habit = family_habit(family, seed) if style == "habit" else None
        for i in order[:round(rate * len(indices))]:  # a nested set: a higher rate only adds rows
            kind = habit or random.Random(f"kind-{seed}-{records[i].id}").choice(sorted(labeler_mistakes(records[i])))
            noisy[i] = kind
    out = []
    for index, record in enumerate(records):
        if index in noisy:
            kind = noisy[index]
            record = replace(record, target=labeler_mistakes(record)[kind],
                             meta={**record.meta, "noise": kind, "gold": record.target})
        out.append(record)
    return out


def demonstration_passes(record: tasks.Prompt) -> bool:
    """Does the demonstration's answer pass the checker? (Checked against the task as it was
    posed: some checkers read the prompt record's gold target, which a noisy record replaced.)"""
    task = replace(record, target=record.meta.get("gold", record.target))
    return tasks.check(task, record.target).passed


def passing_only(records: list) -> list[tasks.Prompt]:
    """Filtered SFT's data: the demonstrations whose answer passes the checker (the strongest
    non-RL control: rejection sampling keeps only what a verifier accepts)."""
    return [r for r in records if demonstration_passes(r)]
