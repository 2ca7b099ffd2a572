"""The quizzes of both editions, as a learner sees them: none may be answerable by its form alone.

What is read. Every ``MultipleChoice`` / ``MultiSelect`` of every lesson, English (``notebooks/``) and
Korean (``notebooks/ko/``), from two places that must agree: the quiz cell's source (the authored
options, the key, ``shuffle``) and its stored output (the question and the options in the order and
under the letters the learner is shown, after quiz.py's shuffle seeded by the question text, or by the
``order_key`` that the translation merge gives a Korean question: the English question, so that a
Korean quiz shows the English order under the English letters, which a test checks here). A key
the notebook computes from its own run (``lab_key``, ``zero_gradient``) is not in the source as a
literal: ``COMPUTED_KEYS`` records it as that stored run gives it, and a test checks that every
computed key, and only those, is listed there.

The rules (each one a way a test-wise learner finds the key without knowing the answer):

- Letters, per notebook: no letter holds more than half of a notebook's single-answer keys, so answering
  one letter throughout never scores above half (with 4 or 5 questions: 2; with 3: 1).
- Letters, per language: every letter a-d holds some key, and none holds more than 40% of the
  edition's single-answer keys (25% is an even spread over four options).
- Multi-select: the correct options are not one contiguous block of letters (a, b, c or c, d).
- The key is not the strictly longest option.
- The key is not the only hedged option ("usually", "may", "can", "often", "some"; 보통, 흔히, 수 있...)
  among unhedged ones, nor the only option without an absolute ("never", "exactly", "nothing", "cannot";
  절대, 전혀, 정확히, 수 없...) where every wrong option has one; in a multi-select, the absolutes do not
  sit on false statements only.
- The key is not the only option that opens differently (three options "That ...", the key "Because ...").
- The key does not restate the question: at least half of its words come from the question, and clearly
  more than in any wrong option (the words counted without function words; Korean by syllable pairs,
  which ignores the particles).
- A "since/because" (Korean 때문/므로/니까) clause does not single out the key or the wrong options.

``KNOWN`` holds a quiz that fails a rule and cannot be fixed in the same change (a strict xfail naming
the week and what fails; fixing the quiz turns it into a failure to remove). It is empty: a rewritten
option whose quiz shows only literals and f-strings of values already shown is brought into the stored
output without re-executing the lesson (``translate --rerender-quizzes HEAD <lesson>``).
"""

from __future__ import annotations

import ast
import json
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pytest

from course_utils.lesson_aids.quiz import display_order
from course_utils.machinery.paths import NOTEBOOKS_DIR

EDITIONS = {"en": sorted(NOTEBOOKS_DIR.glob("week*.ipynb")), "ko": sorted((NOTEBOOKS_DIR / "ko").glob("week*.ipynb"))}
HEADING = {"en": re.compile(r"^Question (\d+) \(quiz\[(\d+)\]\): ", re.M),
           "ko": re.compile(r"^문제 (\d+) \(quiz\[(\d+)\]\): ", re.M)}
ANSWER_LINE = {"en": "Answer in code:", "ko": "코드로 답하기:"}
OPTION_LINE = re.compile(r"^  ([a-z])\) (.*)$")
CHOICE_KINDS = ("MultipleChoice", "MultiSelect")

# Keys the notebooks compute from their own runs, as the stored run gives them:
# (lesson, index in its Quiz) -> the authored labels of the correct options, and where that comes from.
COMPUTED_KEYS = {
    ("week04_ratio_clipping", 2): (("b", "e"), "section 3's table: zero gradient for A > 0 above the band and "
                                               "A < 0 below it"),
    ("week05_kl_shaping", 4): (("a", "c"), "section 4: k1 and k3 unbiased, k2 biased, swapped k1 is -KL, k3 as "
                                           "a reward has another gradient"),
    ("week06b_reward_model", 3): (("a", "c", "e"), "section 8's sweep: wrong_arithmetic +0.00, reordered -0.01, "
                                                   "missing_item +0.13 are the margins below 0.5 (misspelled +1.88, "
                                                   "comma_separated +1.60, wrong_brackets +3.07 are not)"),
    ("week06b_reward_model", 4): (("a",), "section 6: 30 of 54 failures (56%) score at or above the mean pass, "
                                          "more than a few percent (above 5%): about the same for both moves"),
    ("week06b_reward_model", 5): (("a",), "section 7's probe: filler_x1 mean change about -2.9"),
    ("week07_ppo_run", 6): (("a",), "the lab: a gap of 6 points at update 10 with a standard error of 7.0, "
                                    "within the noise"),
    ("week07_ppo_run", 8): (("a",), "section 3's table: the run ended on its training-time budget"),
    ("week09_policy_lag", 5): (("a",), "q_ratio = 1 + cliprange + 0.05 lies above the band"),
    ("week11_when_is_ppo_worth_it", 2): (("d",), "design (f) at 0.75: filtered SFT's 61.7 is the best mean"),
}


@dataclass(frozen=True)
class Shown:
    """One choice question as the learner sees it."""
    edition: str
    notebook: str
    number: int                    # 1-based, as the quiz prints it
    kind: str
    question: str
    options: dict                  # displayed letter -> text, in the displayed order
    key: frozenset                 # displayed letters of the correct options
    shuffle: bool
    authored: dict | None          # authored label -> text (None when the options are computed)
    authored_key: tuple
    order_key: str | None = None   # the text that seeded the shuffle, where it is not the question
    order: tuple = ()              # the authored labels in the displayed order
    source_question: str | None = None  # the question as the source writes it (None: an f-string)

    @property
    def id(self) -> str:
        return f"{self.edition}/{self.notebook}/q{self.number}"

    @property
    def single(self) -> bool:
        return self.kind == "MultipleChoice"

    def right(self) -> list[str]:
        return [text for letter, text in self.options.items() if letter in self.key]

    def wrong(self) -> list[str]:
        return [text for letter, text in self.options.items() if letter not in self.key]


def _literal(node):
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError):
        return None  # computed in the notebook: an f-string, a variable


def _quiz_calls(source: str) -> list[ast.Call]:
    """The question calls of the cell's ``Quiz(title, [...])``, in order."""
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "Quiz":
            return [q for q in node.args[1].elts if isinstance(q, ast.Call)]
    return []


def _output_text(cell: dict) -> str:
    for output in cell.get("outputs", []):
        text = output.get("data", {}).get("text/plain")
        if text:
            return "".join(text)
    return ""


def _shown_blocks(text: str, edition: str) -> list[tuple[str, dict]]:
    """The questions of a stored quiz output: (question text, {letter: option text}) per question."""
    blocks = []
    heads = list(HEADING[edition].finditer(text))
    for head, following in zip(heads, heads[1:] + [None]):
        body = text[head.end():following.start() if following else len(text)]
        question, options = [], {}
        for line in body.rstrip("\n").split("\n"):
            match = OPTION_LINE.match(line)
            if match:
                options[match.group(1)] = " ".join(match.group(2).split())
            elif line.startswith(ANSWER_LINE[edition]):
                break
            elif not options:
                question.append(line)
        index = int(head.group(2))
        blocks.append(("\n".join(question).replace(f"quiz[{index}].", "quiz."), options))
    return blocks


def _english_questions(path: Path, edition: str) -> dict[str, list[str]]:
    """Cell id -> the questions its stored quiz output shows, in the English notebook of ``path``
    (an f-string ``order_key`` of a Korean quiz is the English question, as that output shows it)."""
    english = NOTEBOOKS_DIR / path.name
    if edition == "en" or not english.is_file():
        return {}
    return {cell["id"]: [question for question, _ in _shown_blocks(_output_text(cell), "en")]
            for cell in json.loads(english.read_text(encoding="utf-8"))["cells"]
            if cell["cell_type"] == "code" and "Quiz(" in "".join(cell["source"])}


def read_quiz(path: Path, edition: str) -> tuple[list[Shown], list[str]]:
    """The choice questions of one notebook as shown, and every disagreement between source and output."""
    shown, problems = [], []
    english_questions = _english_questions(path, edition)
    for cell in json.loads(path.read_text(encoding="utf-8"))["cells"]:
        source = "".join(cell["source"])
        if cell["cell_type"] != "code" or "Quiz(" not in source:
            continue
        calls = _quiz_calls(source)
        blocks = _shown_blocks(_output_text(cell), edition)
        if len(blocks) != len(calls):
            problems.append(f"{path.name}: the stored quiz output shows {len(blocks)} questions, the source has "
                            f"{len(calls)} (re-execute the notebook)")
            continue
        for index, (call, (question, displayed)) in enumerate(zip(calls, blocks)):
            kind = call.func.id
            if kind not in CHOICE_KINDS:
                continue
            keywords = {k.arg: k.value for k in call.keywords}
            authored = _literal(call.args[1])
            key_node = keywords.get("answer") or keywords.get("answers") or (call.args[2] if len(call.args) > 2 else None)
            key = _literal(key_node)
            computed = COMPUTED_KEYS.get((path.stem, index))
            if key is None:
                if computed is None:
                    problems.append(f"{path.name} question {index + 1}: its key is computed; add it to COMPUTED_KEYS")
                    continue
                key = computed[0]
            elif computed is not None:
                problems.append(f"{path.name} question {index + 1}: its key is a literal now; drop it from COMPUTED_KEYS")
            key = (key,) if isinstance(key, str) else tuple(key)
            shuffle = _literal(keywords["shuffle"]) if "shuffle" in keywords else True
            order_key = None
            if "order_key" in keywords:
                order_key = _literal(keywords["order_key"])
                if order_key is None:  # an f-string: the English question, with the values its output shows
                    order_key = (english_questions.get(cell.get("id")) or [None] * (index + 1))[index]
                if order_key is None:
                    problems.append(f"{path.name} question {index + 1}: its order_key is neither a literal nor "
                                    "the question of the English notebook's cell")
                    continue
            labels = sorted(displayed) if shuffle else list(authored or displayed)
            order = display_order(question if order_key is None else order_key, labels) if shuffle else labels
            letter_of = {label: letter for label, letter in zip(order, labels)}
            if authored is not None:
                expected = {letter_of[label]: text for label, text in authored.items()}
                if {k: " ".join(v.split()) for k, v in expected.items()} != displayed:
                    problems.append(f"{path.name} question {index + 1}: the stored output does not show the source's "
                                    "options in quiz.py's order (re-execute the notebook)")
                    continue
            shown.append(Shown(edition, path.stem, index + 1, kind, question, displayed,
                               frozenset(letter_of[label] for label in key), shuffle, authored, key, order_key,
                               tuple(order), _literal(call.args[0] if call.args else keywords.get("question"))))
    return shown, problems


READ = {(edition, path.stem): read_quiz(path, edition) for edition, paths in EDITIONS.items() for path in paths}
ALL = [q for questions, _ in READ.values() for q in questions]
SINGLE = [q for q in ALL if q.single]
MULTI = [q for q in ALL if not q.single]


# ---------------------------------------------------------------------------------------------------
# The rules, as functions of one question (a reason when it gives itself away, else "")

HEDGE = {"en": re.compile(r"\b(usually|often|may|might|can|could|some|sometimes|typically|generally|mostly|"
                          r"largely|tends?|partly|probably|perhaps|possibly|rarely|seldom|somewhat)\b", re.I),
         "ko": re.compile(r"보통|대개|대체로|흔히|종종|가끔|때때로|일부|어느 정도|아마|주로|수 있|기도 합|경향|"
                          r"경우가 많|경우가 있")}
ABSOLUTE = {"en": re.compile(r"\b(never|always|nothing|none|cannot|can't|impossible|exactly|entirely|"
                             r"completely|whatever)\b", re.I),
            "ko": re.compile(r"절대|결코|전혀|항상|언제나|아무것도|아무 |영영|정확히|수 없|불가능")}
CONNECTIVE = {"en": re.compile(r"\b(since|because)\b", re.I), "ko": re.compile(r"때문|므로|니까")}
STOPWORDS = set("""a an the of to in on at by for from with and or but not no is are was were be been being it its
this that these those there here as than then so do does did has have had what which who when where how why
into onto over under about after before only also just one each every all any both either more most less very
same other such their they them his her we you your our if while up down out off""".split())
TOKEN = re.compile(r"[A-Za-z_]+|[\uac00-\ud7a3]+")


def opening(text: str) -> str:
    """The first word of an option (lower case, without punctuation)."""
    match = re.match(r"\W*([\w\u0370-\u03ff]+)", text)
    return match.group(1).lower() if match else ""


def words(text: str) -> set[str]:
    """The content words of a text: English words without function words and plural -s, Korean
    words as syllable pairs (so '온도로' and '온도가' share '온도')."""
    found = set()
    for token in TOKEN.findall(text):
        if re.match(r"[\uac00-\ud7a3]", token):
            found |= {token[i:i + 2] for i in range(len(token) - 1)} or {token}
        else:
            word = token.lower()
            if word in STOPWORDS or len(word) < 2:
                continue
            found.add(word[:-1] if len(word) > 3 and word.endswith("s") and not word.endswith("ss") else word)
    return found


def from_the_question(q: Shown, text: str) -> float:
    """The share of an option's content words that the question already holds."""
    mine = words(text)
    return len(mine & words(q.question)) / len(mine) if mine else 0.0


def longest(q: Shown) -> str:
    key, others = len(q.right()[0]), [len(t) for t in q.wrong()]
    return f"the key is the longest option ({key} characters, the others {others})" if key > max(others) else ""


def only_hedged(q: Shown) -> str:
    hedge = HEDGE[q.edition]
    if hedge.search(q.right()[0]) and not any(hedge.search(t) for t in q.wrong()):
        return f"the key is the only hedged option ({hedge.search(q.right()[0]).group(0)!r})"
    return ""


def only_without_absolute(q: Shown) -> str:
    absolute = ABSOLUTE[q.edition]
    if not absolute.search(q.right()[0]) and all(absolute.search(t) for t in q.wrong()):
        found = [absolute.search(t).group(0) for t in q.wrong()]
        return f"every wrong option has an absolute ({found}), the key none"
    return ""


def opens_differently(q: Shown) -> str:
    wrong = {opening(t) for t in q.wrong()}
    key = opening(q.right()[0])
    if len(q.wrong()) >= 2 and len(wrong) == 1 and key not in wrong:
        return f"every wrong option opens with {wrong.pop()!r}, the key with {key!r}"
    return ""


def restates_the_question(q: Shown) -> str:
    key = from_the_question(q, q.right()[0])
    best_wrong = max(from_the_question(q, t) for t in q.wrong())
    if key >= 0.5 and key - best_wrong >= 0.2:
        return f"{key:.0%} of the key's words come from the question, at most {best_wrong:.0%} of a wrong option's"
    return ""


def because_marks(q: Shown) -> str:
    connective = CONNECTIVE[q.edition]
    has = [bool(connective.search(t)) for t in q.options.values()]
    right = {bool(connective.search(t)) for t in q.right()}
    wrong = {bool(connective.search(t)) for t in q.wrong()}
    if len(right) == 1 and len(wrong) == 1 and right != wrong and len(has) > 2:
        side = "only the key" if right == {True} else "every option but the key"
        return f"a since/because clause marks {side}"
    return ""


def contiguous(q: Shown) -> str:
    letters = sorted(q.key)
    positions = [ord(letter) - ord("a") for letter in letters]
    if 1 < len(letters) < len(q.options) and positions == list(range(positions[0], positions[0] + len(letters))):
        return f"the correct options are one block: {', '.join(letters)}"
    return ""


def absolutes_on_false_only(q: Shown) -> str:
    absolute = ABSOLUTE[q.edition]
    false_with = [absolute.search(t).group(0) for t in q.wrong() if absolute.search(t)]
    if false_with and not any(absolute.search(t) for t in q.right()):
        return f"only false statements carry absolutes ({false_with})"
    return ""


SINGLE_RULES = {"longest": longest, "only_hedged": only_hedged, "only_without_absolute": only_without_absolute,
                "opens_differently": opens_differently, "restates_the_question": restates_the_question,
                "because_marks": because_marks}
MULTI_RULES = {"contiguous": contiguous, "absolutes_on_false_only": absolutes_on_false_only,
               "because_marks": because_marks}


def most_on_one_letter(questions: list[Shown]) -> tuple[int, Counter]:
    letters = Counter(next(iter(q.key)) for q in questions if q.shuffle)
    return (max(letters.values()) if letters else 0), letters


# ---------------------------------------------------------------------------------------------------
# Known failures (module docstring): strict xfails, so a fixed quiz turns its entry into a failure to remove.

KNOWN: dict[tuple[str, str], str] = {}


def cases(items, rule_names, ids):
    """pytest params of (item, rule) with the KNOWN failures marked as strict xfails."""
    params = []
    for item, item_id in zip(items, ids):
        for rule in rule_names:
            reason = KNOWN.get((item_id, rule))
            marks = [pytest.mark.xfail(strict=True, reason=reason)] if reason else []
            params.append(pytest.param(item, rule, id=f"{item_id}:{rule}", marks=marks))
    return params


# ---------------------------------------------------------------------------------------------------
# What is read


def test_both_editions_are_read():
    assert len(EDITIONS["en"]) >= 12 and len(EDITIONS["ko"]) >= 5, {k: len(v) for k, v in EDITIONS.items()}
    assert {q.notebook for q in ALL if q.edition == "ko"} >= {"week01_four_models", "week05_kl_shaping"}
    assert len([q for q in SINGLE if q.edition == "en"]) >= 30 and len([q for q in SINGLE if q.edition == "ko"]) >= 15


READ_IDS = [f"{edition}/{stem}" for edition, stem in sorted(READ)]


@pytest.mark.parametrize("where, rule", cases(sorted(READ), ["stored"], READ_IDS))
def test_the_stored_quiz_is_the_source_quiz(where, rule):
    """The output shows the source's questions, in quiz.py's order; a computed key is in COMPUTED_KEYS."""
    questions, problems = READ[where]
    assert questions, f"{where}: no choice question read"
    assert not problems, "\n".join(problems)


def test_computed_keys_are_exactly_the_listed_ones():
    """A key computed in a notebook is in COMPUTED_KEYS, and every entry there is such a key (read from the source)."""
    computed = set()
    for path in EDITIONS["en"]:
        for cell in json.loads(path.read_text(encoding="utf-8"))["cells"]:
            source = "".join(cell["source"])
            if cell["cell_type"] != "code" or "Quiz(" not in source:
                continue
            for index, call in enumerate(_quiz_calls(source)):
                keywords = {k.arg: k.value for k in call.keywords}
                key = keywords.get("answer") or keywords.get("answers")
                if call.func.id in CHOICE_KINDS and _literal(key) is None:
                    computed.add((path.stem, index))
    assert computed == set(COMPUTED_KEYS), (computed - set(COMPUTED_KEYS), set(COMPUTED_KEYS) - computed)


def test_the_reader_sees_what_quiz_py_shows():
    from course_utils.lesson_aids.quiz import MultipleChoice, MultiSelect

    for q in ALL:
        if q.authored is None:
            continue
        built = (MultipleChoice(q.question, q.authored, q.authored_key[0], shuffle=q.shuffle, order_key=q.order_key)
                 if q.single else
                 MultiSelect(q.question, q.authored, list(q.authored_key), shuffle=q.shuffle, order_key=q.order_key))
        assert {k: " ".join(v.split()) for k, v in built.options.items()} == q.options, q.id
        assert ({built.answer} if q.single else built.answers) == set(q.key), q.id


KO_IDS = sorted(q.id for q in ALL if q.edition == "ko")


@pytest.mark.parametrize("ko_id", KO_IDS)
def test_a_korean_quiz_shows_the_english_order(ko_id):
    """The translation merge seeds a Korean question's shuffle with the English question (``order_key``):
    the Korean options are shown in the English order, under the same letters, so the English key serves
    both and the letter rules above, written for the English quizzes, hold in Korean as a consequence."""
    ko = next(q for q in ALL if q.id == ko_id)
    en = next(q for q in ALL if q.edition == "en" and (q.notebook, q.number) == (ko.notebook, ko.number))
    assert ko.kind == en.kind and ko.authored_key == en.authored_key, ko_id
    if not ko.shuffle:
        assert ko.order == en.order, ko_id
        return
    # The English question as the English source writes it (an f-string: as the English output shows it), so
    # that an English notebook whose stored quiz predates its source (its own test fails) does not fail this one.
    english = en.source_question if en.source_question is not None else en.question
    assert ko.order_key == english, f"{ko_id}: the order key is not the English question"
    order = tuple(display_order(english, sorted(ko.options)))
    assert ko.order == order, (f"{ko_id}: shown as {ko.order}, the English quiz as {order}; regenerate the Korean "
                               "notebook (python -m course_utils translate)")
    assert ko.key == {letter for label, letter in zip(order, sorted(ko.options)) if label in en.authored_key}


# ---------------------------------------------------------------------------------------------------
# The rules catch what they should (so a pass below means something)


def _q(options: dict, key, question="Which statement is true?", edition="en", kind="MultipleChoice") -> Shown:
    key = (key,) if isinstance(key, str) else tuple(key)
    return Shown(edition, "example", 1, kind, question, options, frozenset(key), True, options, key)


def test_the_rules_catch_the_tells():
    assert longest(_q({"a": "short", "b": "a much longer option", "c": "mid-size"}, "b"))
    assert not longest(_q({"a": "short", "b": "same length", "c": "same length"}, "b"))
    assert only_hedged(_q({"a": "It is always 1.", "b": "It can drift a little.", "c": "It is 0."}, "b"))
    assert only_without_absolute(_q({"a": "It never moves.", "b": "It moves up.", "c": "It is exactly 1."}, "b"))
    assert opens_differently(_q({"a": "That it grows.", "b": "Because it shrinks.", "c": "That it stays."}, "b"))
    assert restates_the_question(_q({"a": "Ratios differ because the temperatures differ.", "b": "A crash.",
                                     "c": "Nothing changes at all."}, "a",
                                    question="The temperatures differ. What happens to the ratios?"))
    assert because_marks(_q({"a": "It grows, because of A.", "b": "It shrinks.", "c": "It stays."}, "a"))
    assert contiguous(_q({"a": "x", "b": "y", "c": "z", "d": "w"}, ("b", "c"), kind="MultiSelect"))
    assert not contiguous(_q({"a": "x", "b": "y", "c": "z", "d": "w"}, ("a", "c"), kind="MultiSelect"))
    assert absolutes_on_false_only(_q({"a": "It never flips.", "b": "It shifts.", "c": "It scales."}, ("b", "c"),
                                      kind="MultiSelect"))
    assert only_hedged(_q({"a": "항상 1입니다.", "b": "조금 움직일 수 있습니다.", "c": "0입니다."}, "b", edition="ko"))
    assert words("온도로 나눕니다") & words("온도가 다릅니다")


def test_the_multi_select_usage_example_is_never_a_key():
    """The "Answer in code" line shows an example response; were it a key, it would give the answer away.
    A contiguous block of two is never a key (the contiguous rule below) while a question has more options."""
    from course_utils.lesson_aids.quiz import PHRASES

    for language, phrases in PHRASES.items():
        lists = re.findall(r"check\(\[([^\]]*)\]\)", phrases["usage_many"])
        strings = re.findall(r"check\('([a-z, ]+)'\)", phrases["usage_many"])
        examples = {tuple(re.findall(r"[a-z]", lst)) for lst in lists} | {tuple(re.findall(r"[a-z]", t)) for t in strings}
        assert examples == {("a", "b")}, (language, phrases["usage_many"])
    assert all(len(q.options) > 2 for q in MULTI), [q.id for q in MULTI if len(q.options) <= 2]
    assert contiguous(_q({"a": "x", "b": "y", "c": "z"}, ("a", "b"), kind="MultiSelect"))


# ---------------------------------------------------------------------------------------------------
# The rules, on every quiz of both editions


@pytest.mark.parametrize("q, rule", cases(SINGLE, SINGLE_RULES, [q.id for q in SINGLE]))
def test_a_single_answer_key_does_not_give_itself_away(q, rule):
    reason = SINGLE_RULES[rule](q)
    assert not reason, f"{q.id} ({q.question[:70]}): {reason}"


@pytest.mark.parametrize("q, rule", cases(MULTI, MULTI_RULES, [q.id for q in MULTI]))
def test_a_multi_select_key_does_not_give_itself_away(q, rule):
    reason = MULTI_RULES[rule](q)
    assert not reason, f"{q.id} ({q.question[:70]}): {reason}"


NOTEBOOK_IDS = sorted({f"{q.edition}/{q.notebook}" for q in SINGLE})


@pytest.mark.parametrize("where, rule", cases(NOTEBOOK_IDS, ["letters"], NOTEBOOK_IDS))
def test_no_letter_holds_more_than_half_of_a_notebooks_keys(where, rule):
    mine = [q for q in SINGLE if f"{q.edition}/{q.notebook}" == where]
    most, letters = most_on_one_letter(mine)
    n = sum(letters.values())
    assert most <= max(1, n // 2), f"{where}: keys shown at {dict(sorted(letters.items()))} (at most {max(1, n // 2)} of {n} on one letter)"


# Issue 35: a "since/because" clause must not mark the wrong options or the keys of a block of lessons as a whole.
BLOCKS = {"weeks01-05": ("week01", "week02", "week03", "week04", "week05"),
          "weeks06a-11": ("week06a", "week06b", "week07", "week08", "week09", "week10", "week11")}
BLOCK_IDS = [(edition, block) for edition in EDITIONS for block in BLOCKS
             if any(q.edition == edition and q.notebook.startswith(BLOCKS[block]) for q in SINGLE)]


@pytest.mark.parametrize("edition, block", BLOCK_IDS, ids=[f"{e}/{b}" for e, b in BLOCK_IDS])
def test_a_since_or_because_marks_neither_the_keys_nor_the_wrong_options_of_a_block(edition, block):
    mine = [q for q in SINGLE if q.edition == edition and q.notebook.startswith(BLOCKS[block])]
    connective = CONNECTIVE[edition]
    keys = [q.right()[0] for q in mine]
    wrong = [t for q in mine for t in q.wrong()]
    share_keys = sum(bool(connective.search(t)) for t in keys) / len(keys)
    share_wrong = sum(bool(connective.search(t)) for t in wrong) / len(wrong)
    assert abs(share_keys - share_wrong) <= 0.15, (edition, block, share_keys, share_wrong)


@pytest.mark.parametrize("edition, rule", cases(list(EDITIONS), ["letters"], list(EDITIONS)))
def test_each_language_spreads_its_keys_over_the_letters(edition, rule):
    mine = [q for q in SINGLE if q.edition == edition]
    most, letters = most_on_one_letter(mine)
    n = sum(letters.values())
    assert set(letters) >= set("abcd"), (edition, dict(sorted(letters.items())))
    assert most <= 0.4 * n, f"{edition}: keys shown at {dict(sorted(letters.items()))}: one letter holds {most} of {n}"
