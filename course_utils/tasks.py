"""Checkable instruction-following tasks: families, splits, a strict checker and two rewards.

Ten task families, each a short user message with one exact correct answer, so a program can
grade what the policy writes (no reward model needed):

    family             example prompt                                                  target
    result_sum         Add 23 and 41. Reply with one line: RESULT: <sum>               RESULT: 64
    number_only        Write seventy-three in digits. Reply with the number only.      73
    count_words        How many words are in this list: dog, cat, sun? ... COUNT: <number>   COUNT: 3
    json_object        Write a JSON object with "name" set to "lemon" and "size" ...   {"name": "lemon", "size": 12}
    comma_no_spaces    Join these words with commas and no spaces: red, blue, green    red,blue,green
    alphabetical_order Sort these words alphabetically: pear, fig, lime. ...           fig lime pear
    lowercase_word     Write the word PLANET in lowercase letters. ...                 planet
    uppercase_word     Write the word planet in capital letters. ...                   PLANET
    bracket_word       Write the word lemon inside square brackets. ...                [lemon]
    yes_no_parity      Is 14 an even number? Answer Yes or No only.                    Yes

The first six kinds (an exact ``RESULT: <sum>`` line, numbers, JSON without a code fence,
comma-separated with no spaces, lowercase-exact, yes/no) come from the source lesson; ordering,
counting, capitalisation and brackets (a prefix and a suffix) are ours.

How strict the checker is (the same rule for every family; every instruction asks for the bare
answer: "Reply with the word only", "Answer Yes or No only", "Reply with one line: ..."):
surrounding whitespace and newlines are ignored; everything else must match the target exactly --
case, spaces, punctuation (``planet.`` fails, ``yes`` fails where ``Yes`` is asked). The one
exception is JSON, which is compared after ``json.loads`` (so spacing inside the object and key
order are free, but types are not: ``"12"`` is not ``12``). A failed check always says why.

Splits: train 400, validation 100, test 100 prompts (40/10/10 per family), generated from a seed.
Numbers (10-201), words and JSON keys are partitioned between the splits before any prompt is
made, so no number, word or key in a validation or test prompt ever appears in a training prompt.
Answers that can only take a few values are balanced instead: Yes/No exactly 50/50 and the word
counts 3..7 exactly uniform in every split, so a constant answer scores exactly chance.

Two rewards: ``binary_reward`` (1 if the check passes, else 0) and ``partial_credit_reward``, a
shaped reward for early exploration whose tiers are built so the known hacks never pay:

    1.0        pass: exactly right
    0.4..0.8   bare answer with the right content, a formatting rule broken
               (0.4 + 0.4 * fraction of the family's formatting rules met, e.g. ``RESULT:64``)
    0.2        plain wrong: a bare answer of the right shape with the wrong content (this
               includes the prompt's material copied unchanged: PLANET when asked for lowercase)
    0.05..0.15 the right answer buried in extra text: a preamble, an explanation, a code fence
               (0.05 + 0.1 * the answer's share of the text, so dropping chatter pays a little)
    0.0        nothing usable, or a hack: the placeholder (``<sum>``) copied, the prompt repeated

Content comes before form: format credit above 0.2 needs the prompt's own content (its sum, its
word, its items), so a constant answer or a copied placeholder cannot collect it, and wrapping or
padding any answer (even the correct one) drops it below a plain wrong answer.
"""

from __future__ import annotations

import json
import os
import random
import re
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path

from course_utils.machinery.paths import DATA_DIR

SPLIT_SIZES = {"train": 400, "validation": 100, "test": 100}
SPLITS = tuple(SPLIT_SIZES)
DEFAULT_SEED = 0
DATA_ENV_VAR = "COURSE_DATA_DIR"
DATA_FORMAT_VERSION = 1

# Reward tiers of partial_credit_reward (see the module docstring).
PASS_REWARD = 1.0
PARTIAL_FLOOR = 0.4
PARTIAL_SPAN = 0.4
PLAIN_WRONG_REWARD = 0.2
BURIED_MIN, BURIED_SPAN = 0.05, 0.10  # buried: 0.05 + 0.1 * share of the text; < PLAIN_WRONG_REWARD
NO_REWARD = 0.0


# --------------------------------------------------------------------------------------------
# Records
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Prompt:
    """One task instance.

    id:     unique, e.g. ``"train-result_sum-007"``
    family: key of ``TASK_FAMILIES``
    split:  ``"train"``, ``"validation"`` or ``"test"``
    prompt: the user message, sent through the chat template as is
    target: the canonical correct answer (the checker's ``passed`` is True for it)
    meta:   what the checker needs (the sum, the words, the JSON object, the placeholders, ...)
            plus ``numbers``/``words``: the numbers and content words the prompt uses
    """

    id: str
    family: str
    split: str
    prompt: str
    target: str
    meta: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, record: Mapping) -> Prompt:
        missing = [k for k in ("id", "family", "split", "prompt", "target") if k not in record]
        if missing:
            raise KeyError(f"prompt record lacks {missing}; expected the fields of tasks.Prompt")
        return cls(record["id"], record["family"], record["split"], record["prompt"],
                   record["target"], dict(record.get("meta", {})))


@dataclass(frozen=True)
class CheckResult:
    """Verdict of ``check``.

    passed: the answer is exactly right
    reason: why it failed, in plain words ("correct" when it passed)
    tier:   "pass", "partial", "plain_wrong", "buried" or "nothing" (the reward tiers)
    tier_score: where the answer sits inside its tier, 0..1: the fraction of the family's
            formatting rules met ("partial"), or the share of the text taken by the right
            answer ("buried"); 1.0 for "pass", 0.0 otherwise
    """

    passed: bool
    reason: str
    tier: str
    tier_score: float = 0.0


@dataclass(frozen=True)
class Bare:
    """How a family reads an answer that has the bare shape of an answer (nothing around it).

    content_ok:  the answer carries this prompt's own content (its sum, its word, its items)
    content_msg: why the content is wrong (used when content_ok is False)
    rules:       (score in [0, 1], message) per formatting rule; message is shown when score < 1
    """

    content_ok: bool
    content_msg: str = ""
    rules: tuple[tuple[float, str], ...] = ()


@dataclass(frozen=True)
class TaskFamily:
    """A family of prompts sharing one instruction format and one checker.

    name:     key in TASK_FAMILIES
    origin:   "lesson" (a kind from the source lesson) or "ours"
    template: the prompt with its slots in braces (the words outside braces are the template)
    form:     the shape of a correct answer, in words, for failure messages
    generate: (rng, pools, n) -> n tuples (prompt text, target, meta), all distinct
    read_bare: (prompt, stripped answer) -> Bare, or None when the answer is not bare
    find_answer: (prompt, stripped answer) -> True if the right answer is somewhere inside
    labels:   the closed set of possible targets (balanced in every split), () if open-ended
    """

    name: str
    origin: str
    template: str
    form: str
    generate: Callable
    read_bare: Callable
    find_answer: Callable
    labels: tuple[str, ...] = ()

    def is_exact(self, prompt: Prompt, text: str) -> bool:
        """True when the stripped answer is exactly right (JSON: equal after json.loads)."""
        if self.name == "json_object":
            return text.startswith("{") and _json_equal(_try_json(text), prompt.meta["object"])
        return text == prompt.target




# --------------------------------------------------------------------------------------------
# Vocabulary, partitioned between splits
# --------------------------------------------------------------------------------------------

# 159 everyday nouns, lowercase, none of them a word of any template.
WORDS = tuple("""
apple pear plum grape lemon lime mango peach melon cherry olive bread cheese honey rice bean
corn onion carrot pepper sugar cake soup tiger lion bear wolf fox owl duck goat sheep frog
shark whale eagle crow snake camel zebra panda rabbit deer bee ant moth river lake ocean hill
cloud rain snow storm stone rock sand leaf tree flower grass forest island valley desert moon
star planet comet chair table lamp door window clock book pencil paper bottle cup plate spoon
fork knife basket candle mirror pillow blanket ladder hammer rope bell drum flute guitar piano
kite ball coin box bag hat coat shoe sock glove scarf button castle garden bridge tower market
school farm harbor village road tent boat canoe truck wagon rocket engine wheel anchor compass
map flag shell pearl feather nest egg acorn cactus maple tulip daisy violet wheat barley cotton
silk wool velvet marble copper silver iron crystal jelly muffin waffle cookie pasta noodle
""".split())

# JSON keys (the "labels" of the JSON family): partitioned between splits like the words.
STRING_KEYS = ("name", "item", "label", "title", "tag", "kind", "topic", "thing", "pick", "choice",
               "entry", "noun")
NUMBER_KEYS = ("quantity", "size", "age", "score", "level", "total", "price", "rank", "weight",
               "height", "speed", "amount")
NUMBER_RANGE = (10, 202)  # numbers 10..201 are used in prompts


@dataclass(frozen=True)
class Pools:
    """The numbers, words and JSON keys one split may use (disjoint from the other splits)."""

    numbers: tuple[int, ...]
    words: tuple[str, ...]
    string_keys: tuple[str, ...]
    number_keys: tuple[str, ...]


def _stratified_partition(items, rng: random.Random) -> dict[str, list]:
    """Cut items into consecutive blocks of 6 and send 4 to train, 1 to validation, 1 to test.

    Blocks keep every split spread over the whole range (each split gets small and large
    numbers alike); which member of a block goes where is random. Leftovers go to train.
    """
    parts = {"train": [], "validation": [], "test": []}
    items = list(items)
    full = len(items) - len(items) % 6
    for start in range(0, full, 6):
        block = rng.sample(items[start:start + 6], 6)
        parts["train"] += block[:4]
        parts["validation"].append(block[4])
        parts["test"].append(block[5])
    parts["train"] += items[full:]
    return {k: sorted(v) for k, v in parts.items()}


def split_pools(seed: int = DEFAULT_SEED) -> dict[str, Pools]:
    """The disjoint number/word/key pools of the three splits for this seed."""
    rng = random.Random(f"course-tasks-{seed}-pools")
    numbers = _stratified_partition(range(*NUMBER_RANGE), rng)
    words = _stratified_partition(sorted(WORDS), rng)
    skeys = _stratified_partition(sorted(STRING_KEYS), rng)
    nkeys = _stratified_partition(sorted(NUMBER_KEYS), rng)
    return {s: Pools(tuple(numbers[s]), tuple(words[s]), tuple(skeys[s]), tuple(nkeys[s]))
            for s in SPLITS}


# --------------------------------------------------------------------------------------------
# Small helpers shared by the families
# --------------------------------------------------------------------------------------------

_ONES = ("zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen "
         "fifteen sixteen seventeen eighteen nineteen").split()
_TENS = "_ _ twenty thirty forty fifty sixty seventy eighty ninety".split()


def number_to_words(n: int) -> str:
    """English words for 0 <= n < 1000: 73 -> "seventy-three", 120 -> "one hundred twenty"."""
    if not 0 <= n < 1000:
        raise ValueError(f"number_to_words covers 0..999, got {n}")
    if n < 20:
        return _ONES[n]
    if n < 100:
        tens, ones = divmod(n, 10)
        return _TENS[tens] + (f"-{_ONES[ones]}" if ones else "")
    hundreds, rest = divmod(n, 100)
    return f"{_ONES[hundreds]} hundred" + (f" {number_to_words(rest)}" if rest else "")


def _distinct(rng: random.Random, n: int, draw: Callable[[], tuple], what: str) -> list[tuple]:
    """Draw n distinct items with draw() (rejection sampling; fails loudly if the pool is small)."""
    seen, out = set(), []
    for _ in range(200 * n):
        item = draw()
        key = item[0]
        if key not in seen:
            seen.add(key)
            out.append(item)
            if len(out) == n:
                return out
    raise ValueError(f"could not draw {n} distinct {what}; the split's pool is too small")


def _has_token(text: str, token: str, flags: int = 0) -> bool:
    """token occurs in text, not glued to letters or digits on either side."""
    return re.search(rf"(?<![A-Za-z0-9]){re.escape(token)}(?![A-Za-z0-9])", text, flags) is not None


def _try_json(text: str):
    try:
        return json.loads(text)
    except ValueError:
        return None


def _json_equal(got, expected) -> bool:
    """JSON equality that also compares types (True is not 1, "12" is not 12)."""
    if type(got) is not type(expected):
        return False
    if isinstance(expected, dict):
        return got.keys() == expected.keys() and all(_json_equal(got[k], v) for k, v in expected.items())
    if isinstance(expected, list):
        return len(got) == len(expected) and all(_json_equal(a, b) for a, b in zip(got, expected))
    return got == expected


def _embedded_json_objects(text: str):
    """Every JSON object that starts at some "{" inside text."""
    decoder = json.JSONDecoder()
    for match in re.finditer(r"\{", text):
        try:
            obj, _ = decoder.raw_decode(text, match.start())
        except ValueError:
            continue
        if isinstance(obj, dict):
            yield obj


def _fraction(flags) -> float:
    flags = list(flags)
    return sum(map(bool, flags)) / len(flags) if flags else 1.0


def _split_list(text: str, separator: str) -> tuple[list[str], list[str], str]:
    """Split "a, b,c." into (items, separators, trailing punctuation)."""
    body, punct = (text[:-1], text[-1]) if text[-1:] in ".!" else (text, "")
    return re.split(separator, body), re.findall(separator, body), punct


# --------------------------------------------------------------------------------------------
# The families: generate, read a bare answer, find a buried answer
# --------------------------------------------------------------------------------------------


def _read_labelled_number(label: str, text: str, expected: int, what: str) -> Bare | None:
    """Read 'LABEL: 64'-style lines, tolerating case, colon and spacing slips (graded as rules)."""
    m = re.fullmatch(r"([A-Za-z]+)( *)(:?)( *)([+-]?\d+)([.!]?)", text)
    if not m or m.group(1).lower() != label.lower():
        return None
    word, before, colon, after, digits, punct = m.groups()
    if int(digits) != expected:
        return Bare(False, f"the {what} is wrong: got {int(digits)}, expected {expected}")
    return Bare(True, rules=(
        (word == label, f"write the label as {label} in capital letters"),
        (colon == ":", f"put a colon after {label}"),
        (before == "" and after == " ", f"put exactly one space after '{label}:' and none before the colon"),
        (digits == str(expected), "write the number plainly, without a sign or leading zeros"),
        (punct == "", "put nothing after the number (no full stop)"),
    ))


# result_sum --------------------------------------------------------------------------------

def _gen_result_sum(rng, pools: Pools, n: int):
    small = [x for x in pools.numbers if x < 100]

    def draw():
        a, b = rng.sample(small, 2)
        return a + b, a, b

    out = []
    for total, a, b in _distinct(rng, n, draw, "sums"):  # distinct sums: no two prompts share a target
        out.append((f"Add {a} and {b}. Reply with one line: RESULT: <sum>", f"RESULT: {total}",
                    {"a": a, "b": b, "sum": total, "placeholders": ["<sum>"], "numbers": [a, b],
                     "words": [], "echo": f"{a} and {b}"}))
    return out


def _read_result_sum(p: Prompt, text: str):
    return _read_labelled_number("RESULT", text, p.meta["sum"], "sum")


def _find_result_sum(p: Prompt, text: str) -> bool:
    return _has_token(text, str(p.meta["sum"]))


# number_only -------------------------------------------------------------------------------

def _gen_number_only(rng, pools: Pools, n: int):
    small = [x for x in pools.numbers if x < 100]
    out = []
    for (x,) in _distinct(rng, n, lambda: (rng.choice(small),), "numbers"):
        words = number_to_words(x)
        out.append((f"Write {words} in digits. Reply with the number only.", str(x),
                    {"number": x, "placeholders": [], "numbers": [x], "words": [], "echo": words}))
    return out


def _read_number_only(p: Prompt, text: str):
    m = re.fullmatch(r"([+]?)(\d[\d,]*)([.!]?)", text)
    if not m:
        return None
    sign, digits, punct = m.groups()
    value, expected = int(digits.replace(",", "")), p.meta["number"]
    if value != expected:
        return Bare(False, f"wrong number: got {value}, expected {expected}")
    return Bare(True, rules=(
        (sign == "" and digits == str(expected), "write only the digits (no sign, commas or leading zeros)"),
        (punct == "", "put nothing after the number (no full stop)"),
    ))


def _find_number_only(p: Prompt, text: str) -> bool:
    return _has_token(text, str(p.meta["number"]))


# count_words -------------------------------------------------------------------------------

COUNT_LABELS = tuple(f"COUNT: {k}" for k in range(3, 8))


def _gen_count_words(rng, pools: Pools, n: int):
    sizes = list(range(3, 8)) * (n // 5)  # every count equally often: a constant guess scores 1/5
    if len(sizes) != n:
        raise ValueError(f"count_words needs a multiple of 5 prompts per split, got {n}")
    rng.shuffle(sizes)
    out, seen = [], set()
    for size in sizes:
        for _ in range(1000):
            words = rng.sample(pools.words, size)
            if frozenset(words) not in seen:
                break
        else:
            raise ValueError("could not draw distinct word lists; the split's word pool is too small")
        seen.add(frozenset(words))
        listed = ", ".join(words)
        out.append((f"How many words are in this list: {listed}? Reply with one line: COUNT: <number>",
                    f"COUNT: {size}",
                    {"count": size, "placeholders": ["<number>"], "numbers": [], "words": words,
                     "echo": listed}))
    return out


def _read_count_words(p: Prompt, text: str):
    return _read_labelled_number("COUNT", text, p.meta["count"], "count")


def _find_count_words(p: Prompt, text: str) -> bool:
    return _has_token(text, str(p.meta["count"]))


# json_object -------------------------------------------------------------------------------

def _gen_json_object(rng, pools: Pools, n: int):
    values = rng.sample(pools.words, n)  # distinct values: no two prompts share a key/value pair
    numbers = rng.sample(pools.numbers, n)
    out = []
    for word, number in zip(values, numbers):
        skey, nkey = rng.choice(pools.string_keys), rng.choice(pools.number_keys)
        obj = {skey: word, nkey: number}
        out.append((f'Write a JSON object with "{skey}" set to "{word}" and "{nkey}" set to {number}. '
                    "Reply with the JSON only, no code fence.",
                    json.dumps(obj),
                    {"object": obj, "placeholders": [], "numbers": [number], "words": [skey, word, nkey],
                     "echo": f'"{skey}" set to "{word}" and "{nkey}" set to {number}'}))
    return out


def _read_json_object(p: Prompt, text: str):
    if not (text.startswith("{") and text.endswith("}")):
        return None
    obj = _try_json(text)
    if not isinstance(obj, dict):
        return None
    expected = p.meta["object"]
    pair_ok = {k: k in obj and _json_equal(obj[k], v) for k, v in expected.items()}
    if not any(pair_ok.values()):
        return Bare(False, f"no key has the value asked for; expected {json.dumps(expected)}")
    extra = sorted(set(obj) - set(expected))
    rules = tuple(
        (ok, f'"{k}" should be {json.dumps(expected[k])}, got '
             f'{json.dumps(obj[k]) if k in obj else "nothing"}') for k, ok in pair_ok.items())
    return Bare(True, rules=rules + ((not extra, f"remove the keys that were not asked for: {extra}"),))


def _find_json_object(p: Prompt, text: str) -> bool:
    return any(_json_equal(obj, p.meta["object"]) for obj in _embedded_json_objects(text))


# comma_no_spaces ---------------------------------------------------------------------------

def _gen_comma_no_spaces(rng, pools: Pools, n: int):
    def draw():
        words = rng.sample(pools.words, rng.choice((3, 4)))
        return frozenset(words), words

    out = []
    for _, words in _distinct(rng, n, draw, "word lists"):
        listed = ", ".join(words)
        out.append((f"Join these words with commas and no spaces: {listed}", ",".join(words),
                    {"words": words, "placeholders": [], "numbers": [], "echo": listed}))
    return out


def _read_comma_no_spaces(p: Prompt, text: str):
    if not re.fullmatch(r"[A-Za-z]+(?: *, *[A-Za-z]+)*[.!]?", text):
        return None
    items, seps, punct = _split_list(text, r" *, *")
    words = p.meta["words"]
    if [w.lower() for w in items] != words:
        if sorted(w.lower() for w in items) == sorted(words):
            return Bare(False, f"the words are not in the order given: expected {','.join(words)}")
        return Bare(False, f"not the words given: expected {','.join(words)}")
    if all(s != "," for s in seps):  # the prompt's list copied unchanged earns plain-wrong only
        return Bare(False, f"every comma still has spaces around it: expected {','.join(words)}")
    return Bare(True, rules=(
        (_fraction(s == "," for s in seps), "remove the spaces around the commas"),
        (items == words, "write the words in lowercase, as given"),
        (punct == "", "put nothing after the last word (no full stop)"),
    ))


def _find_comma_no_spaces(p: Prompt, text: str) -> bool:
    return _has_token(text, p.target)


# alphabetical_order ------------------------------------------------------------------------

def _gen_alphabetical_order(rng, pools: Pools, n: int):
    def draw():
        for _ in range(1000):
            words = rng.sample(pools.words, 3)
            if len({w[0] for w in words}) == 3 and words != sorted(words):
                return frozenset(words), words  # distinct first letters; never already sorted
        raise ValueError("could not draw three words with distinct first letters")

    out = []
    for _, words in _distinct(rng, n, draw, "word lists"):
        listed = ", ".join(words)
        out.append((f"Sort these words alphabetically: {listed}. Reply with the words separated by single spaces.",
                    " ".join(sorted(words)),
                    {"words": words, "placeholders": [], "numbers": [], "echo": listed}))
    return out


def _read_alphabetical_order(p: Prompt, text: str):
    if not re.fullmatch(r"[A-Za-z]+(?:(?: *, *| +)[A-Za-z]+)*[.!]?", text):
        return None
    items, seps, punct = _split_list(text, r" *, *| +")
    expected = sorted(p.meta["words"])
    if len(items) != len(expected):  # "The answer is fig lime pear" is all words, but not the list
        return None
    if [w.lower() for w in items] != expected:  # unsorted (e.g. the prompt's own order): no content
        if sorted(w.lower() for w in items) == expected:
            return Bare(False, f"not in alphabetical order: expected {' '.join(expected)}")
        return Bare(False, f"not the words given: expected {' '.join(expected)}")
    return Bare(True, rules=(
        (_fraction(s == " " for s in seps), "separate the words with single spaces, no commas"),
        (items == expected, "write the words in lowercase, as given"),
        (punct == "", "put nothing after the last word (no full stop)"),
    ))


def _find_alphabetical_order(p: Prompt, text: str) -> bool:
    return _has_token(text, p.target)


# lowercase_word / uppercase_word -----------------------------------------------------------

def _gen_case_word(upper_target: bool):
    def generate(rng, pools: Pools, n: int):
        out = []
        for word in rng.sample(pools.words, n):
            if upper_target:
                text, target = f"Write the word {word} in capital letters. Reply with the word only.", word.upper()
            else:
                text, target = f"Write the word {word.upper()} in lowercase letters. Reply with the word only.", word
            shown = word if upper_target else word.upper()
            out.append((text, target, {"words": [word], "placeholders": [], "numbers": [], "echo": shown}))
        return out
    return generate


def _read_case_word(upper_target: bool):
    def read(p: Prompt, text: str):
        m = re.fullmatch(r"([A-Za-z]+)([.!]?)", text)
        if not m:
            return None
        word, punct = m.groups()
        if word.lower() != p.target.lower():
            return Bare(False, f"wrong word: expected {p.target}")
        right_case = [c.isupper() if upper_target else c.islower() for c in word]
        case_name = "capital" if upper_target else "lowercase"
        if not any(right_case):  # the prompt's word copied unchanged earns plain-wrong only
            return Bare(False, f"no letter is {case_name}: expected {p.target}")
        return Bare(True, rules=(
            (_fraction(right_case), f"write every letter in {case_name}"),
            (punct == "", "put nothing after the word (no full stop)"),
        ))
    return read


def _find_word(p: Prompt, text: str) -> bool:
    return _has_token(text, p.target)


# bracket_word ------------------------------------------------------------------------------

def _gen_bracket_word(rng, pools: Pools, n: int):
    return [(f"Write the word {w} inside square brackets. Reply with nothing else.", f"[{w}]",
             {"words": [w], "placeholders": [], "numbers": [], "echo": w})
            for w in rng.sample(pools.words, n)]


def _read_bracket_word(p: Prompt, text: str):
    m = re.fullmatch(r"([\[({<]?)( *)([A-Za-z]+)( *)([\])}>]?)([.!]?)", text)
    if not m:
        return None
    opening, space1, word, space2, closing, punct = m.groups()
    expected = p.meta["words"][0]
    if word.lower() != expected:
        return Bare(False, f"wrong word: expected [{expected}]")
    if not (opening and closing):  # the bare word (the prompt's word copied) earns plain-wrong only
        return Bare(False, f"the word is not inside brackets: expected [{expected}]")
    return Bare(True, rules=(
        (opening == "[" and closing == "]", "use square brackets [ ]"),
        (space1 == space2 == "", "no spaces inside the brackets"),
        (word == expected, "write the word in lowercase, as given"),
        (punct == "", "put nothing after the closing bracket (no full stop)"),
    ))


def _find_bracket_word(p: Prompt, text: str) -> bool:
    return p.target in text


# yes_no_parity -----------------------------------------------------------------------------

def _gen_yes_no_parity(rng, pools: Pools, n: int):
    if n % 2:
        raise ValueError(f"yes_no_parity needs an even number of prompts per split, got {n}")
    evens = [x for x in pools.numbers if x % 2 == 0]
    odds = [x for x in pools.numbers if x % 2 == 1]
    labels = ["Yes"] * (n // 2) + ["No"] * (n // 2)  # exactly 50/50: a constant answer scores 50%
    numbers = iter(rng.sample(evens, n // 2) + rng.sample(odds, n // 2))
    out = []
    for label in labels:
        x = next(numbers)
        out.append((f"Is {x} an even number? Answer Yes or No only.", label,
                    {"number": x, "label": label, "placeholders": [], "numbers": [x], "words": [],
                     "echo": str(x)}))
    rng.shuffle(out)
    return out


def _read_yes_no(p: Prompt, text: str):
    m = re.fullmatch(r"(?i)(yes|no)([.!]?)", text)
    if not m:
        return None
    word, punct = m.groups()
    if word.lower() != p.target.lower():
        parity = "even" if p.meta["number"] % 2 == 0 else "odd"
        return Bare(False, f"wrong answer: {p.meta['number']} is {parity}, so the answer is {p.target}")
    return Bare(True, rules=(
        (word == p.target, f"write {p.target} exactly: capital first letter, the rest lowercase"),
        (punct == "", "put nothing after the answer (no full stop)"),
    ))


def _find_yes_no(p: Prompt, text: str) -> bool:
    other = "No" if p.target == "Yes" else "Yes"  # an answer holding both is a hedge, not an answer
    return _has_token(text, p.target) and not _has_token(text, other, re.IGNORECASE)


# --------------------------------------------------------------------------------------------
# Registry
# --------------------------------------------------------------------------------------------

TASK_FAMILIES: dict[str, TaskFamily] = {f.name: f for f in (
    TaskFamily("result_sum", "lesson", "Add {a} and {b}. Reply with one line: RESULT: <sum>",
               "one line 'RESULT: <the sum>'", _gen_result_sum, _read_result_sum, _find_result_sum),
    TaskFamily("number_only", "lesson", "Write {number in words} in digits. Reply with the number only.",
               "the number in digits, nothing else", _gen_number_only, _read_number_only, _find_number_only),
    TaskFamily("json_object", "lesson",
               'Write a JSON object with "{key}" set to "{word}" and "{key}" set to {number}. '
               "Reply with the JSON only, no code fence.",
               "a bare JSON object, no code fence", _gen_json_object, _read_json_object, _find_json_object),
    TaskFamily("comma_no_spaces", "lesson", "Join these words with commas and no spaces: {words}",
               "the words joined by commas, no spaces", _gen_comma_no_spaces, _read_comma_no_spaces,
               _find_comma_no_spaces),
    TaskFamily("lowercase_word", "lesson",
               "Write the word {WORD} in lowercase letters. Reply with the word only.",
               "the one word in lowercase", _gen_case_word(False), _read_case_word(False), _find_word),
    TaskFamily("yes_no_parity", "lesson", "Is {number} an even number? Answer Yes or No only.",
               "Yes or No", _gen_yes_no_parity, _read_yes_no, _find_yes_no, labels=("Yes", "No")),
    TaskFamily("alphabetical_order", "ours",
               "Sort these words alphabetically: {words}. Reply with the words separated by single spaces.",
               "the words in alphabetical order, separated by single spaces",
               _gen_alphabetical_order, _read_alphabetical_order, _find_alphabetical_order),
    TaskFamily("count_words", "ours",
               "How many words are in this list: {words}? Reply with one line: COUNT: <number>",
               "one line 'COUNT: <the number>'", _gen_count_words, _read_count_words, _find_count_words,
               labels=COUNT_LABELS),
    TaskFamily("uppercase_word", "ours",
               "Write the word {word} in capital letters. Reply with the word only.",
               "the one word in capital letters", _gen_case_word(True), _read_case_word(True), _find_word),
    TaskFamily("bracket_word", "ours", "Write the word {word} inside square brackets. Reply with nothing else.",
               "the word inside square brackets, nothing else", _gen_bracket_word, _read_bracket_word,
               _find_bracket_word),
)}


# --------------------------------------------------------------------------------------------
# Splits
# --------------------------------------------------------------------------------------------


UNSEEN_SPLIT = "test_unseen"
"""The test prompts asked in instruction phrasings that no training or SFT prompt uses."""


def _check_split_name(split: str) -> None:
    if split not in SPLIT_SIZES and split != UNSEEN_SPLIT:
        raise ValueError(f"unknown split {split!r}; use one of {[*SPLIT_SIZES, UNSEEN_SPLIT]}")


def _rephrased(p: Prompt) -> tuple[str, str]:
    """(prompt, echo) of record ``p`` asked with another sentence template: the same numbers,
    words, target and checker, different instruction wording."""
    m = p.meta
    listed = ", ".join(m.get("words", []))
    if p.family == "result_sum":
        return f"What is {m['a']} plus {m['b']}? Give the answer as a single line of the form RESULT: <sum>", \
            f"{m['a']} plus {m['b']}"
    if p.family == "number_only":
        words = number_to_words(m["number"])
        return f"Give the number {words} using digits. Answer with the digits and nothing else.", words
    if p.family == "count_words":
        return f"Count the words in the list {listed}. Answer in a single line: COUNT: <number>", listed
    if p.family == "json_object":
        (skey, word), (nkey, number) = m["object"].items()
        return (f'Produce JSON where the key "{skey}" has the value "{word}" and the key "{nkey}" has the value '
                f"{number}. Output only the raw JSON, without a code block."), f'"{skey}" has the value "{word}"'
    if p.family == "comma_no_spaces":
        return f"Combine {listed} into one string separated by commas, without any spaces.", listed
    if p.family == "alphabetical_order":
        return f"Put {listed} in alphabetical order. Answer with the words separated by single spaces.", listed
    if p.family == "uppercase_word":
        return f"Convert {m['words'][0]} to upper case. Answer with the converted word alone.", m["words"][0]
    if p.family == "lowercase_word":
        shown = m["words"][0].upper()
        return f"Convert {shown} to lower case. Answer with the converted word alone.", shown
    if p.family == "bracket_word":
        return f"Put square brackets around the word {m['words'][0]}. Answer with nothing more.", m["words"][0]
    if p.family == "yes_no_parity":
        return f"Is the number {m['number']} divisible by 2? Reply with just Yes or No.", str(m["number"])
    raise ValueError(f"no unseen phrasing for task family {p.family!r}")


def make_unseen_split(test: list[Prompt]) -> list[Prompt]:
    """The test split asked differently (``UNSEEN_SPLIT``): a gain there is not template memorisation."""
    out = []
    for p in test:
        prompt, echo = _rephrased(p)
        out.append(Prompt(id=p.id.replace("test-", f"{UNSEEN_SPLIT}-", 1), family=p.family, split=UNSEEN_SPLIT,
                          prompt=prompt, target=p.target, meta={**p.meta, "echo": echo}))
    return out


def make_split(split: str, seed: int = DEFAULT_SEED) -> list[Prompt]:
    """The prompts of one split, generated deterministically from seed.

    Each family gets SPLIT_SIZES[split] / 10 prompts drawn only from this split's pools; the
    families are then shuffled together (a fixed order for a given seed) so that any slice of the
    list mixes families.
    """
    _check_split_name(split)
    pools = split_pools(seed)[split]
    per_family, rest = divmod(SPLIT_SIZES[split], len(TASK_FAMILIES))
    if rest:
        raise ValueError(f"split size {SPLIT_SIZES[split]} is not a multiple of {len(TASK_FAMILIES)} families")
    prompts = []
    for name, family in TASK_FAMILIES.items():
        rng = random.Random(f"course-tasks-{seed}-{split}-{name}")
        for i, (text, target, meta) in enumerate(family.generate(rng, pools, per_family)):
            prompts.append(Prompt(f"{split}-{name}-{i:03d}", name, split, text, target, meta))
    random.Random(f"course-tasks-{seed}-{split}-order").shuffle(prompts)
    return prompts


def make_all_splits(seed: int = DEFAULT_SEED) -> dict[str, list[Prompt]]:
    return {split: make_split(split, seed) for split in SPLITS}


# --------------------------------------------------------------------------------------------
# Checker and rewards
# --------------------------------------------------------------------------------------------


def as_prompt(record) -> Prompt:
    """Accept a Prompt or a dict read from the JSONL files."""
    if isinstance(record, Prompt):
        return record
    if isinstance(record, Mapping):
        return Prompt.from_dict(record)
    raise TypeError(f"expected a tasks.Prompt or its dict, got {type(record).__name__}")


def _squash(text: str) -> str:
    return " ".join(text.lower().split())


def check(prompt_record, answer: str) -> CheckResult:
    """Grade one decoded response strictly; say why it failed.

    Order of the checks: empty -> the placeholder copied (<sum>, <number>) -> the prompt repeated
    -> a bare answer of the family's shape (then content, then each formatting rule) -> anything
    else (code fence, preamble, explanation, several lines), where the tier records whether the
    right answer is at least buried inside.
    """
    p = as_prompt(prompt_record)
    if not isinstance(answer, str):
        raise TypeError(f"answer must be the decoded response text (str), got {type(answer).__name__}")
    family = TASK_FAMILIES[p.family]
    text = answer.strip()
    if not text:
        return CheckResult(False, "the answer is empty", "nothing")
    for placeholder in p.meta.get("placeholders", []):
        if placeholder.lower() in text.lower():
            return CheckResult(False, f"copied the placeholder {placeholder} from the prompt instead of "
                                      "filling it in", "nothing")
    if _squash(p.prompt) in _squash(text):
        return CheckResult(False, "repeats the prompt instead of answering it", "nothing")

    bare = family.read_bare(p, text)
    if bare is not None:
        if not bare.content_ok:
            return CheckResult(False, bare.content_msg, "plain_wrong")
        rules = list(bare.rules)
        exact = family.is_exact(p, text)
        if not exact and all(score >= 1 for score, _ in rules):  # a slip no named rule describes
            rules.append((0.0, f"write it exactly as {p.target}"))
        if exact:
            return CheckResult(True, "correct", "pass", 1.0)
        met = sum(score for score, _ in rules) / len(rules)
        return CheckResult(False, "; ".join(msg for score, msg in rules if score < 1), "partial", met)

    if "```" in text:
        why = "is wrapped in a code fence (```); reply with the bare answer"
    elif p.family == "json_object" and text.startswith("{") and not isinstance(_try_json(text), dict):
        why = "is not a valid JSON object (json.loads fails: use double quotes, no trailing text)"
    elif "\n" in text:
        why = "spans several lines; reply with one line only"
    else:
        why = f"is not in the requested form ({family.form})"
    if family.find_answer(p, text):
        share = min(1.0, len(p.target) / len(text))
        return CheckResult(False, f"{why} (the right answer is in there, with extra text around it)",
                           "buried", share)
    return CheckResult(False, f"{why}; expected {p.target}", "nothing")


def reward_for(result: CheckResult) -> float:
    """Map a CheckResult to the partial-credit reward (the tiers of the module docstring)."""
    if result.tier == "pass":
        return PASS_REWARD
    if result.tier == "partial":
        return PARTIAL_FLOOR + PARTIAL_SPAN * result.tier_score  # < 0.8: some rule failed
    if result.tier == "plain_wrong":
        return PLAIN_WRONG_REWARD
    if result.tier == "buried":
        return BURIED_MIN + BURIED_SPAN * result.tier_score  # < 0.15: never above plain wrong
    return NO_REWARD


def partial_credit_reward(prompt_record, answer: str) -> float:
    """Shaped reward in [0, 1], equal to 1.0 exactly when check() passes.

    r = 1.0 (pass) | 0.4 + 0.4*tier_score (right content, format slips) | 0.2 (plain wrong)
      | 0.05 + 0.1*share (right answer buried in extra text or a code fence) | 0.0 (nothing / hack)
    """
    return reward_for(check(prompt_record, answer))


def binary_reward(prompt_record, answer: str) -> float:
    """1.0 if check() passes, else 0.0."""
    return 1.0 if check(prompt_record, answer).passed else 0.0


# --------------------------------------------------------------------------------------------
# Files: data/*.jsonl and data/manifest.json
# --------------------------------------------------------------------------------------------


def default_data_dir() -> Path:
    """$COURSE_DATA_DIR if set, else the repository's data/ next to the package."""
    env = os.environ.get(DATA_ENV_VAR)
    return Path(env) if env else DATA_DIR


PAIR_FIELDS = ("prompt", "chosen", "rejected", "kind", "family")
"""The fields of a preference pair that the reward model reads."""
DATA_FIX = "Fix: correct that line, or regenerate data/ with `python -m course_utils data`"


def _read_jsonl(path: Path) -> list[tuple[int, dict]]:
    """``(line number, record)`` for every non-blank line of a JSON-lines file. A broken line, a
    byte that is not UTF-8 or a line that is not an object is named with its file and line."""
    if not path.exists():
        raise FileNotFoundError(f"{path} does not exist. Fix: run `make data` "
                                f"(or `python -m course_utils data`), or set {DATA_ENV_VAR}.")
    rows = []
    with path.open("rb") as f:
        for number, raw in enumerate(f, start=1):
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as error:
                raise ValueError(f"{path}, line {number}: byte {raw[error.start]:#04x} at column {error.start + 1} "
                                 f"is not UTF-8. {DATA_FIX}") from None
            if not text.strip():
                continue
            try:
                record = json.loads(text)
            except json.JSONDecodeError as error:
                raise ValueError(f"{path}, line {number}: not valid JSON ({error.msg}, column {error.colno}). "
                                 f"{DATA_FIX}") from None
            if not isinstance(record, dict):
                raise ValueError(f"{path}, line {number}: a JSON object {{...}} was expected, got "
                                 f"{type(record).__name__}. {DATA_FIX}")
            rows.append((number, record))
    return rows


def _require_fields(path: Path, number: int, record: dict, names) -> dict:
    if missing := [k for k in names if k not in record]:
        raise ValueError(f"{path}, line {number}: the record lacks the field(s) {missing}. {DATA_FIX}")
    return record


def load_split(split: str, data_dir: str | os.PathLike | None = None) -> list[Prompt]:
    """Read the committed prompts of one split (data/{split}.jsonl)."""
    _check_split_name(split)
    folder = Path(data_dir) if data_dir is not None else default_data_dir()
    path = folder / f"{split}.jsonl"
    records = []
    for number, record in _read_jsonl(path):
        _require_fields(path, number, record, ("id", "family", "split", "prompt", "target"))
        if record["family"] not in TASK_FAMILIES:
            raise ValueError(f"{path}, line {number}: unknown task family {record['family']!r} (the checker knows "
                             f"{', '.join(TASK_FAMILIES)}). {DATA_FIX}")
        records.append(Prompt.from_dict(record))
    return records


def load_pairs(split: str, data_dir: str | os.PathLike | None = None) -> list[dict]:
    """Read the committed preference pairs of one split (data/pairs_{split}.jsonl)."""
    _check_split_name(split)
    folder = Path(data_dir) if data_dir is not None else default_data_dir()
    path = folder / f"pairs_{split}.jsonl"
    return [_require_fields(path, n, r, PAIR_FIELDS) for n, r in _read_jsonl(path)]
