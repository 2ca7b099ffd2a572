"""Preference pairs for reward-model training: one correct answer against many kinds of wrong ones.

The source lesson's first reward model saw too few kinds of wrong answers: it scored ``RESULT:81``
(a missing space) almost as high as the right line and even liked wrong sums. The fix was to pair
each chosen answer with many *kinds* of rejected answers. Here every prompt gets 3 or 4 pairs
(30% of each family's prompts get a 4th), which makes 1,320 / 330 / 330 pairs for the
400 / 100 / 100 prompts of train / validation / test:

    kind                  example (target -> rejected)
    wrong_arithmetic      RESULT: 64 -> RESULT: 66            (also wrong_number, wrong_count,
    wrong_value           {"size": 12} -> {"size": 13}         wrong_label: the content is wrong)
    code_fence            {...} -> ```json {...} ```
    case_violation        planet -> Planet
    numbered_list         red,blue,green -> 1. red / 2. blue / 3. green
    reordered             fig lime pear -> pear fig lime
    spacing               RESULT: 64 -> RESULT:64             (a missing or an extra space)
    preamble              Yes -> Sure! Here is the answer: Yes
    placeholder           RESULT: 64 -> RESULT: <sum>
    ... and trailing_punctuation, echo_input, misspelled, quoted, missing_item, wrong_type,
        invalid_json, missing_key, comma_separated, wrong_brackets, missing_brackets, explanation.

Within a family the kinds are dealt round-robin, so every kind appears about equally often in
every split. Every rejected answer fails ``tasks.check`` (make_preference_pairs raises otherwise).
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Iterable

from course_utils.tasks import DEFAULT_SEED, Prompt, as_prompt, check

PAIRS_PER_PROMPT = 3
EXTRA_PAIR_EVERY = (3, 10)  # 3 of every 10 prompts of a family get one extra pair: 3.3 per prompt
PREAMBLES = ("Sure! Here is the answer: ", "Of course. ", "Here you go:\n", "The answer is ",
             "Certainly! Here it is: ")


def _fence(text: str, language: str = "") -> str:
    return f"```{language}\n{text}\n```"


def _numbered(items: Iterable[str]) -> str:
    return "\n".join(f"{i}. {item}" for i, item in enumerate(items, 1))


def _shift(x: int, rng: random.Random, steps=(1, 2, 10)) -> int:
    """x moved by a small nonzero amount, staying positive."""
    d = rng.choice(steps)
    return x + d if rng.random() < 0.5 or x - d <= 0 else x - d


# One function per family: (prompt, rng) -> {kind: rejected answer}. The order of the kinds is the
# order in which they are dealt, so the kinds the lesson names come first.


def _wrong_result_sum(p: Prompt, rng: random.Random) -> dict[str, str]:
    s, t = p.meta["sum"], p.target
    return {
        "wrong_arithmetic": f"RESULT: {_shift(s, rng)}",
        "spacing": rng.choice([f"RESULT:{s}", f"RESULT:  {s}"]),
        "placeholder": "RESULT: <sum>",
        "case_violation": rng.choice([f"Result: {s}", f"result: {s}"]),
        "code_fence": _fence(t),
        "preamble": rng.choice(PREAMBLES) + t,
        "trailing_punctuation": t + ".",
    }


def _wrong_number_only(p: Prompt, rng: random.Random) -> dict[str, str]:
    x, t = p.meta["number"], p.target
    swapped = int(t[::-1])
    return {
        "wrong_number": str(swapped if swapped != x and t[-1] != "0" else _shift(x, rng)),
        "spacing": f"{t[0]} {t[1:]}",
        "code_fence": _fence(t),
        "preamble": rng.choice(PREAMBLES) + t,
        "echo_input": p.meta["echo"],
        "trailing_punctuation": t + ".",
    }


def _wrong_count_words(p: Prompt, rng: random.Random) -> dict[str, str]:
    k, t = p.meta["count"], p.target
    return {
        "wrong_count": f"COUNT: {_shift(k, rng, steps=(1, 2))}",
        "placeholder": "COUNT: <number>",
        "spacing": f"COUNT:{k}",
        "case_violation": f"Count: {k}",
        "numbered_list": _numbered(p.meta["words"]),
        "code_fence": _fence(t),
        "preamble": rng.choice(PREAMBLES) + t,
    }


def _wrong_json_object(p: Prompt, rng: random.Random) -> dict[str, str]:
    obj = p.meta["object"]
    (skey, word), (nkey, number) = obj.items()
    return {
        "code_fence": _fence(json.dumps(obj, indent=2), "json"),
        "wrong_value": json.dumps({skey: word, nkey: _shift(number, rng)}),
        "case_violation": json.dumps({skey: word.capitalize(), nkey: number}),
        "wrong_type": json.dumps({skey: word, nkey: str(number)}),
        "invalid_json": str(obj),  # Python's repr: single quotes, not JSON
        "missing_key": json.dumps({skey: word}),
        "preamble": rng.choice(PREAMBLES) + json.dumps(obj),
    }


def _wrong_comma_no_spaces(p: Prompt, rng: random.Random) -> dict[str, str]:
    words, t = p.meta["words"], p.target
    stray = rng.randrange(1, len(words))  # one stray space before this word
    return {
        "spacing": rng.choice([", ".join(words), ",".join(words[:stray]) + ", " + ",".join(words[stray:])]),
        "reordered": ",".join(words[1:] + words[:1]),
        "numbered_list": _numbered(words),
        "case_violation": ",".join(w.capitalize() for w in words),
        "code_fence": _fence(t),
        "preamble": rng.choice(PREAMBLES) + t,
        "missing_item": ",".join(words[:-1]),
        "trailing_punctuation": t + ".",
    }


def _wrong_alphabetical_order(p: Prompt, rng: random.Random) -> dict[str, str]:
    s = sorted(p.meta["words"])
    return {
        "reordered": rng.choice([" ".join(p.meta["words"]), " ".join(reversed(s))]),
        "spacing": rng.choice([f"{s[0]}{s[1]} {s[2]}", f"{s[0]}  {s[1]} {s[2]}"]),
        "numbered_list": _numbered(s),
        "case_violation": " ".join(w.capitalize() for w in s),
        "comma_separated": ", ".join(s),
        "code_fence": _fence(p.target),
        "preamble": rng.choice(PREAMBLES) + p.target,
    }


def _wrong_case_word(upper_target: bool) -> Callable:
    def wrong(p: Prompt, rng: random.Random) -> dict[str, str]:
        t = p.target
        cut = rng.randrange(1, len(t))
        return {
            "case_violation": t.capitalize(),
            "echo_input": t.lower() if upper_target else t.upper(),
            "code_fence": _fence(t),
            "preamble": rng.choice(PREAMBLES) + t,
            "trailing_punctuation": t + ".",
            "misspelled": t[:cut] + t[cut + 1:],
            "quoted": f'"{t}"',
        }
    return wrong


def _wrong_bracket_word(p: Prompt, rng: random.Random) -> dict[str, str]:
    w, t = p.meta["words"][0], p.target
    return {
        "wrong_brackets": rng.choice([f"({w})", f"{{{w}}}", f"<{w}>"]),
        "spacing": f"[ {w} ]",
        "case_violation": f"[{w.capitalize()}]",
        "missing_brackets": w,
        "code_fence": _fence(t),
        "preamble": rng.choice(PREAMBLES) + t,
        "trailing_punctuation": t + ".",
    }


def _wrong_yes_no(p: Prompt, rng: random.Random) -> dict[str, str]:
    t, x = p.target, p.meta["number"]
    return {
        "wrong_label": "No" if t == "Yes" else "Yes",
        "case_violation": rng.choice([t.lower(), t.upper()]),
        "preamble": rng.choice(PREAMBLES) + t,
        "explanation": f"{t}, {x} is {'even' if x % 2 == 0 else 'odd'}.",
        "code_fence": _fence(t),
        "trailing_punctuation": t + ".",
    }


WRONG_ANSWERS: dict[str, Callable[[Prompt, random.Random], dict[str, str]]] = {
    "result_sum": _wrong_result_sum,
    "number_only": _wrong_number_only,
    "json_object": _wrong_json_object,
    "comma_no_spaces": _wrong_comma_no_spaces,
    "lowercase_word": _wrong_case_word(False),
    "yes_no_parity": _wrong_yes_no,
    "alphabetical_order": _wrong_alphabetical_order,
    "count_words": _wrong_count_words,
    "uppercase_word": _wrong_case_word(True),
    "bracket_word": _wrong_bracket_word,
}


def wrong_answers(prompt_record, seed: int = DEFAULT_SEED) -> dict[str, str]:
    """Every kind of wrong answer this prompt's family has, {kind: text} (deterministic per seed)."""
    p = as_prompt(prompt_record)
    return WRONG_ANSWERS[p.family](p, random.Random(f"course-pairs-{seed}-{p.id}"))


FOREIGN_FORMAT_KINDS = ("foreign_brackets", "foreign_commas", "foreign_json")


def foreign_format_answers(prompt_record) -> dict[str, str]:
    """The right content written in *another* family's format, {kind: text}: a probe for the reward-model
    sweep only. ``wrong_answers`` holds mistakes within the prompt's own family, and ``make_preference_pairs``
    draws from it, so these stay out of it: adding them there would change the training pairs.

        foreign_brackets   bridge flag sugar -> [bridge flag sugar]       (bracket_word's format)
        foreign_commas     bridge flag sugar -> bridge,flag,sugar         (comma_no_spaces'; several words only)
        foreign_json       RESULT: 64 -> {"answer": "RESULT: 64"}         (a JSON wrapper)
    """
    p = as_prompt(prompt_record)
    t = p.target
    out = {"foreign_brackets": f"[{t}]"}
    if len(t.split()) > 1:  # one word joined with commas is the word itself: the right answer
        out["foreign_commas"] = ",".join(t.split())
    out["foreign_json"] = json.dumps({"answer": t})
    return out


def pairs_for_prompt(index_in_family: int) -> int:
    """How many pairs the index-th prompt of a family gets: 3, or 4 for 3 of every 10."""
    extra, every = EXTRA_PAIR_EVERY
    return PAIRS_PER_PROMPT + (index_in_family % every < extra)


def make_preference_pairs(prompts, seed: int = DEFAULT_SEED) -> list[dict]:
    """Pairs {prompt_id, family, split, prompt, chosen, rejected, kind} for a list of prompts.

    chosen is the prompt's target; rejected cycles through the family's kinds of wrong answers
    (round robin in id order, so the kinds stay balanced). A family with 40 prompts gets
    40*3 + 12 = 132 pairs; with 10 prompts, 33.
    """
    prompts = [as_prompt(p) for p in prompts]
    seen: dict[tuple[str, str], int] = {}  # prompts dealt so far per (split, family)
    dealt: dict[tuple[str, str], int] = {}  # pairs dealt so far per (split, family)
    pairs = []
    for p in sorted(prompts, key=lambda q: q.id):  # id order: independent of the list's order
        group = (p.split, p.family)
        n = pairs_for_prompt(seen.get(group, 0))
        seen[group] = seen.get(group, 0) + 1
        options = wrong_answers(p, seed)
        kinds = list(options)
        start = dealt.get(group, 0)
        dealt[group] = start + n
        for t in range(n):
            kind = kinds[(start + t) % len(kinds)]
            rejected = options[kind]
            if check(p, rejected).passed:
                raise AssertionError(f"rejected answer {rejected!r} ({kind}) passes the checker for {p.id}")
            pairs.append({"prompt_id": p.id, "family": p.family, "split": p.split, "prompt": p.prompt,
                          "chosen": p.target, "rejected": rejected, "kind": kind})
    order = {p.id: i for i, p in enumerate(prompts)}  # keep the caller's (shuffled) prompt order
    pairs.sort(key=lambda pair: order[pair["prompt_id"]])
    return pairs
