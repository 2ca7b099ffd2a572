"""Tests of course_utils.tasks and course_utils.preference_pairs.

What is proved here:
- the splits have the promised sizes, are deterministic, and keep numbers, words and JSON keys
  disjoint between train / validation / test; Yes/No and the counts are exactly balanced;
- the checker agrees with an independent exact-match reference and says why an answer failed;
- the partial-credit reward cannot be gamed: the copied placeholder, a constant answer, a code
  fence, a preamble and an echo of the prompt never earn more than a plain wrong answer, on every
  prompt of every family (adversarial tests plus hypothesis properties);
- the preference pairs have the lesson's counts and kinds, and every rejected answer fails;
- data/ is exactly what write_data produces.
"""

from __future__ import annotations

import collections
import hashlib
import json
import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from course_utils.machinery import data_files
from course_utils import preference_pairs as pp
from course_utils import tasks

LESSON_KINDS = {"result_sum", "lowercase_word", "comma_no_spaces", "json_object", "number_only", "yes_no_parity"}
ISSUE_PAIR_KINDS = {"wrong_arithmetic", "code_fence", "case_violation", "numbered_list", "reordered", "spacing",
                    "preamble", "placeholder"}
PREAMBLES = ("Sure! Here is the answer: ", "Of course.\n\n", "Answer: ", "Here you go: ", "Okay. ",
             "The answer is ", "I think it is ", "Let me help. ")
SUFFIXES = (" I hope this helps!", "\n\nLet me know if you need more.", " (done)", " - that's it")


@pytest.fixture(scope="module")
def splits():
    return tasks.make_all_splits()


@pytest.fixture(scope="module")
def all_prompts(splits):
    return [p for split in tasks.SPLITS for p in splits[split]]


def reward(p, answer):
    return tasks.partial_credit_reward(p, answer)


def by_family(prompts):
    groups = collections.defaultdict(list)
    for p in prompts:
        groups[p.family].append(p)
    return groups


def plain_wrong(p, family_prompts):
    """A plain wrong answer: the bare target of another prompt of the same family and split that
    is wrong here (for Yes/No, the other label). Independent of the reward code."""
    if p.family == "yes_no_parity":
        return "No" if p.target == "Yes" else "Yes"
    for q in family_prompts:
        if q.target != p.target and not tasks.check(p, q.target).passed:
            return q.target
    raise AssertionError(f"no plain wrong answer found for {p.id}")


@pytest.fixture(scope="module")
def wrong_of(all_prompts):
    """{prompt id: plain wrong answer}."""
    out = {}
    groups = collections.defaultdict(list)
    for p in all_prompts:
        groups[(p.split, p.family)].append(p)
    for group in groups.values():
        rotated = group[1:] + group[:1]  # start the search at the next prompt, not this one
        for p, start in zip(group, rotated):
            out[p.id] = plain_wrong(p, [start] + group)
    return out


# ---------------------------------------------------------------------------------------------
# Families and splits
# ---------------------------------------------------------------------------------------------


def test_at_least_ten_families_including_the_lessons_kinds():
    assert len(tasks.TASK_FAMILIES) >= 10
    assert LESSON_KINDS <= set(tasks.TASK_FAMILIES)
    assert {f.origin for f in tasks.TASK_FAMILIES.values()} == {"lesson", "ours"}
    assert set(pp.WRONG_ANSWERS) == set(tasks.TASK_FAMILIES)


def test_split_sizes_ids_and_family_balance(splits):
    ids = set()
    for split, size in {"train": 400, "validation": 100, "test": 100}.items():
        prompts = splits[split]
        assert len(prompts) == size
        assert all(p.split == split for p in prompts)
        counts = collections.Counter(p.family for p in prompts)
        assert set(counts.values()) == {size // len(tasks.TASK_FAMILIES)}
        ids |= {p.id for p in prompts}
        assert len({p.prompt for p in prompts}) == size, "duplicate prompt texts"
    assert len(ids) == 600
    # consecutive prompts mix families (the list is shuffled, not grouped)
    first = [p.family for p in splits["train"][:20]]
    assert len(set(first)) >= 5


def test_splits_are_deterministic_and_depend_on_the_seed():
    a, b = tasks.make_split("validation", seed=0), tasks.make_split("validation", seed=0)
    assert a == b
    c = tasks.make_split("validation", seed=1)
    assert [p.prompt for p in a] != [p.prompt for p in c]


def test_unknown_split_names_the_fix():
    with pytest.raises(ValueError, match="train"):
        tasks.make_split("dev")
    with pytest.raises(ValueError, match="validation"):
        tasks.load_split("valid")


def test_every_target_passes_and_is_short(all_prompts, tiny_tokenizer):
    for p in all_prompts:
        result = tasks.check(p, p.target)
        assert result.passed and result.reason == "correct" and result.tier == "pass", (p.id, result)
        assert reward(p, p.target) == 1.0 and tasks.binary_reward(p, p.target) == 1.0
        assert reward(p, f"\n  {p.target} \n") == 1.0  # surrounding whitespace is ignored
    prompt_tokens = max(len(tiny_tokenizer(p.prompt).input_ids) for p in all_prompts)
    target_tokens = max(len(tiny_tokenizer(p.target).input_ids) for p in all_prompts)
    assert prompt_tokens <= 60, prompt_tokens
    assert target_tokens <= 24, target_tokens


def test_number_to_words_by_hand():
    cases = {10: "ten", 13: "thirteen", 40: "forty", 73: "seventy-three", 99: "ninety-nine",
             100: "one hundred", 120: "one hundred twenty", 201: "two hundred one"}
    for n, words in cases.items():
        assert tasks.number_to_words(n) == words
    with pytest.raises(ValueError):
        tasks.number_to_words(1000)


# ---------------------------------------------------------------------------------------------
# Disjointness and balance
# ---------------------------------------------------------------------------------------------


def _template_tokens(family):
    return set(re.findall(r"[a-z]+", re.sub(r"\{[^}]*\}", " ", family.template).lower()))


def _content(p):
    """(numbers, words) a prompt uses, read from its text: tokens that are not template words.

    Numbers are digit strings, or words spelling a number (number_only), converted back."""
    family = tasks.TASK_FAMILIES[p.family]
    text = p.prompt.lower()
    numbers = {int(d) for d in re.findall(r"\d+", text)}
    # a spelled number anywhere else would surface as content words and fail the words check
    spelled = {tasks.number_to_words(n): n for n in range(10, 202)} if p.family == "number_only" else {}
    for phrase in sorted(spelled, key=len, reverse=True):
        if re.search(rf"(?<![a-z-]){re.escape(phrase)}(?![a-z-])", text):
            numbers.add(spelled[phrase])
            text = text.replace(phrase, " ")
    words = set(re.findall(r"[a-z]+", text)) - _template_tokens(family)
    return numbers, words


def test_numbers_words_and_keys_are_disjoint_between_splits(splits):
    numbers, words = {}, {}
    for split, prompts in splits.items():
        numbers[split], words[split] = set(), set()
        for p in prompts:
            n, w = _content(p)
            assert n == set(p.meta["numbers"]), (p.id, n, p.meta["numbers"])
            assert w == set(p.meta["words"]), (p.id, w, p.meta["words"])
            numbers[split] |= n
            words[split] |= w
    for a, b in [("train", "validation"), ("train", "test"), ("validation", "test")]:
        assert not numbers[a] & numbers[b], (a, b, numbers[a] & numbers[b])
        assert not words[a] & words[b], (a, b, words[a] & words[b])
    # every split still has a healthy vocabulary spread over the whole number range
    assert min(numbers["test"]) < 30 and max(numbers["test"]) > 150


def test_pools_partition_everything_and_avoid_template_words():
    pools = tasks.split_pools(0)
    template = set().union(*(_template_tokens(f) for f in tasks.TASK_FAMILIES.values()))
    for attr, universe in [("numbers", set(range(*tasks.NUMBER_RANGE))), ("words", set(tasks.WORDS)),
                           ("string_keys", set(tasks.STRING_KEYS)), ("number_keys", set(tasks.NUMBER_KEYS))]:
        parts = [set(getattr(pools[s], attr)) for s in tasks.SPLITS]
        assert sum(map(len, parts)) == len(universe) and set().union(*parts) == universe
    vocabulary = set(tasks.WORDS) | set(tasks.STRING_KEYS) | set(tasks.NUMBER_KEYS)
    assert len(vocabulary) == len(tasks.WORDS) + len(tasks.STRING_KEYS) + len(tasks.NUMBER_KEYS)
    assert not vocabulary & template, vocabulary & template


@pytest.mark.parametrize("split", tasks.SPLITS)
def test_closed_label_families_are_balanced_so_constants_score_exactly_chance(splits, split):
    for name, family in tasks.TASK_FAMILIES.items():
        if not family.labels:
            continue
        prompts = [p for p in splits[split] if p.family == name]
        counts = collections.Counter(p.target for p in prompts)
        assert set(counts) == set(family.labels) and len(set(counts.values())) == 1, counts
        for label in family.labels:
            pass_rate = sum(tasks.check(p, label).passed for p in prompts) / len(prompts)
            assert pass_rate == 1 / len(family.labels)  # "Yes" and "No" score exactly 50%
    parity = [p for p in splits[split] if p.family == "yes_no_parity"]
    assert sum(tasks.binary_reward(p, "Yes") for p in parity) / len(parity) == 0.5


# ---------------------------------------------------------------------------------------------
# The checker: exact, independent reference, reasons
# ---------------------------------------------------------------------------------------------


def _reference_passed(p, answer):
    """Independent statement of the rule: exact text after strip; JSON equal after json.loads."""
    text = answer.strip()
    if p.family != "json_object":
        return text == p.target
    if not text.startswith("{"):
        return False
    try:
        got = json.loads(text)
    except ValueError:
        return False
    want = p.meta["object"]
    return (isinstance(got, dict) and set(got) == set(want)
            and all(type(got[k]) is type(v) and got[k] == v for k, v in want.items()))


def _near_misses(p):
    t = p.target
    out = list(pp.wrong_answers(p).values())
    out += [t.upper(), t.lower(), t.title(), t + " ", t + "\n\n", " " + t, t + ".", t + "!", t[:-1], t + t,
            t.replace(" ", ""), t.replace(",", ", "), f'"{t}"', f"'{t}'", f"`{t}`"]
    if p.family == "json_object":
        obj = p.meta["object"]
        out += [json.dumps(obj, indent=2), json.dumps(obj, separators=(",", ":")),
                json.dumps(dict(reversed(list(obj.items())))), json.dumps({**obj, "extra": 1})]
    return out


def test_checker_matches_an_independent_exact_reference(all_prompts):
    for p in all_prompts:
        for answer in _near_misses(p):
            result = tasks.check(p, answer)
            assert result.passed == _reference_passed(p, answer), (p.id, answer, result)
            assert (tasks.binary_reward(p, answer) == 1.0) == result.passed
            assert (reward(p, answer) == 1.0) == result.passed
            if not result.passed:
                assert result.reason and result.reason != "correct"


@pytest.mark.parametrize("family, answer, expected_tier, words_in_reason", [
    ("result_sum", "RESULT:{sum}", "partial", "one space"),
    ("result_sum", "Result: {sum}", "partial", "capital"),
    ("result_sum", "RESULT: {sum}.", "partial", "full stop"),
    ("result_sum", "RESULT: {wrong}", "plain_wrong", "sum is wrong"),
    ("result_sum", "RESULT: <sum>", "nothing", "placeholder"),
    ("result_sum", "```\nRESULT: {sum}\n```", "buried", "code fence"),
    ("result_sum", "Sure! The sum is {sum}.", "buried", "requested form"),
    ("alphabetical_order", "The answer is {target}", "buried", "right answer is in there"),
    ("json_object", "```json\n{target}\n```", "buried", "code fence"),
    ("json_object", "{{'a': 1}}", "nothing", "not a valid JSON"),
    ("lowercase_word", "{Cap}", "partial", "lowercase"),
    ("yes_no_parity", "{lower}", "partial", "capital first letter"),
    ("comma_no_spaces", "{spaced}", "plain_wrong", "spaces"),
    ("count_words", "COUNT: <number>", "nothing", "placeholder"),
])
def test_reasons_say_why(splits, family, answer, expected_tier, words_in_reason):
    p = next(q for q in splits["train"] if q.family == family)
    fill = {"target": p.target, "Cap": p.target.capitalize(), "lower": p.target.lower(),
            "sum": p.meta.get("sum"), "wrong": (p.meta.get("sum") or 0) + 1,
            "spaced": ", ".join(p.meta.get("words", []))}
    result = tasks.check(p, answer.format(**fill))
    assert not result.passed
    assert result.tier == expected_tier, result
    assert words_in_reason in result.reason, result.reason


def test_check_accepts_jsonl_dicts_and_rejects_bad_input(splits):
    p = splits["test"][0]
    assert tasks.check(p.to_dict(), p.target).passed
    assert tasks.check(json.loads(json.dumps(p.to_dict())), p.target).passed
    with pytest.raises(TypeError, match="decoded response"):
        tasks.check(p, None)
    with pytest.raises(TypeError, match="Prompt"):
        tasks.check("not a prompt", "x")


# ---------------------------------------------------------------------------------------------
# The partial-credit reward: shaped, and not gameable
# ---------------------------------------------------------------------------------------------


def test_plain_wrong_answers_earn_the_plain_wrong_tier(all_prompts, wrong_of):
    # the yardstick of the hack tests below must itself be what it claims to be
    for p in all_prompts:
        assert reward(p, wrong_of[p.id]) == tasks.PLAIN_WRONG_REWARD, (p.id, wrong_of[p.id])


def test_tiers_are_ordered_and_format_credit_needs_content(splits):
    p = next(q for q in splits["train"] if q.family == "result_sum")
    s = p.meta["sum"]
    exact, slip, wrong, buried, placeholder = (reward(p, f"RESULT: {s}"), reward(p, f"RESULT:{s}"),
                                               reward(p, f"RESULT: {s + 1}"), reward(p, f"The sum is {s}."),
                                               reward(p, "RESULT: <sum>"))
    assert exact == 1.0 > slip > wrong > buried > placeholder == 0.0
    # the lesson's RESULT:81 case: right sum, a missing space -> partial credit, but well below a pass
    assert 0.4 < slip < 0.8
    # wrong content gets no credit for a near-perfect format: RESULT:<wrong> is just plain wrong
    assert reward(p, f"RESULT:{s + 1}") == wrong == tasks.PLAIN_WRONG_REWARD
    # a shorter buried answer earns a little more than a longer one (gradient towards brevity)
    assert reward(p, f"It is {s}") > reward(p, f"Let me think. Adding the two numbers gives {s}, I believe.")


def _answers_per_hack(p):
    """The hacks of the issue, applied to this prompt's correct answer (the strongest case)."""
    t = p.target
    placeholder_line = p.prompt.split("Reply with one line: ")[-1] if p.meta["placeholders"] else None
    return {
        "placeholder": ([placeholder_line] if placeholder_line else [])
        + [f"{ph}" for ph in p.meta["placeholders"]] + [f"{t} {ph}" for ph in p.meta["placeholders"]]
        + ["<sum>", "<number>", "RESULT: <sum>", "COUNT: <number>"],  # any family's placeholder
        "code_fence": [f"```\n{t}\n```", f"```json\n{t}\n```", f"```text\n{t}\n```", f"```{t}```", f"`{t}`"],
        "preamble": [pre + t for pre in PREAMBLES] + [t + suf for suf in SUFFIXES]
        + [f"{pre}\n```\n{t}\n```" for pre in PREAMBLES[:2]],
        "echo": [p.meta["echo"], p.prompt, f"{p.prompt}\n{t}"],
    }


@pytest.mark.parametrize("hack", ["placeholder", "code_fence", "preamble", "echo"])
def test_hacks_never_beat_a_plain_wrong_answer(all_prompts, wrong_of, hack):
    checked = 0
    for p in all_prompts:
        baseline = reward(p, wrong_of[p.id])
        for answer in _answers_per_hack(p)[hack]:
            r = reward(p, answer)
            assert r <= baseline, (hack, p.id, answer, r, baseline)
            assert not tasks.check(p, answer).passed
            if hack == "placeholder" and any(ph in answer for ph in p.meta["placeholders"]):
                assert r == 0.0  # the prompt's own placeholder: nothing at all
            checked += 1
    assert checked >= len(all_prompts)


def _constants(split_prompts):
    """Candidate constant answers: every distinct target of the split (any family), the placeholder
    lines, and generic replies a collapsed policy might settle on."""
    out = {p.target for p in split_prompts}
    out |= {"RESULT: <sum>", "COUNT: <number>", "Yes", "No", "No.", "yes", "0", "1", "100", "RESULT: 0",
            "RESULT: 100", "COUNT: 4", "{}", "[]", "I don't know.", "Sure! Here is the answer.", "a,b,c",
            "apple", "APPLE", "[apple]", '{"name": "apple", "count": 1}'}
    return sorted(out)


@pytest.mark.parametrize("split", ["validation", "test"])
def test_a_constant_answer_earns_nothing_beyond_its_lucky_hits(splits, wrong_of, split):
    prompts = splits[split]
    groups = by_family(prompts)
    for constant in _constants(prompts):
        for name, group in groups.items():
            lucky = 0  # prompts where the constant happens to carry the right content
            total = 0.0
            for p in group:
                result = tasks.check(p, constant)
                r = tasks.reward_for(result)
                total += r
                if result.tier in ("pass", "partial"):
                    lucky += 1
                else:
                    # wherever its content is wrong, it earns at most what a plain wrong answer earns
                    assert r <= reward(p, wrong_of[p.id]), (constant, p.id, r)
            # so over a family it scores at most chance: full marks on its lucky hits, plain wrong elsewhere
            chance = (lucky + (len(group) - lucky) * tasks.PLAIN_WRONG_REWARD) / len(group)
            assert total / len(group) <= chance + 1e-12
            labels = tasks.TASK_FAMILIES[name].labels
            if labels:  # closed labels are balanced: a constant is right on exactly 1/k of the prompts
                assert lucky in (0, len(group) // len(labels)), (constant, name, lucky)
            else:  # open families: every target is distinct, so a constant is right at most once
                assert lucky <= 1, (constant, name, lucky)


def test_copying_the_placeholder_was_the_lessons_hack_and_earns_zero(all_prompts):
    placeholder_prompts = [p for p in all_prompts if p.meta["placeholders"]]
    assert {p.family for p in placeholder_prompts} == {"result_sum", "count_words"}
    for p in placeholder_prompts:
        for ph in p.meta["placeholders"]:
            for answer in (ph, ph.upper(), f"RESULT: {ph}", f"COUNT: {ph}", f"The answer is {ph}",
                           f"{p.target} or {ph}"):
                assert reward(p, answer) == 0.0, (p.id, answer)


# hypothesis: arbitrary text can never make the hacks pay -------------------------------------

_SAMPLE = tasks.make_split("validation")
_text = st.text(st.characters(codec="ascii", exclude_categories=("Cc",)) | st.sampled_from(["\n", "`", "{", "}", '"']),
                max_size=40)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(p=st.sampled_from(_SAMPLE), text=_text)
def test_reward_bounds_and_consistency_for_any_text(p, text):
    result = tasks.check(p, text)
    r = tasks.reward_for(result)
    assert 0.0 <= r <= 1.0
    assert (r == 1.0) == result.passed == (tasks.binary_reward(p, text) == 1.0)
    assert result.passed == _reference_passed(p, text)
    assert tasks.partial_credit_reward(p, f"\n {text} \t") == r


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(p=st.sampled_from(_SAMPLE), text=_text, preamble=st.sampled_from(PREAMBLES),
       fence=st.sampled_from(["```\n{}\n```", "```json\n{}\n```", "```{}```"]))
def test_fences_and_preambles_never_reach_the_plain_wrong_tier(p, text, preamble, fence):
    assert reward(p, fence.format(text)) < tasks.PLAIN_WRONG_REWARD
    assert reward(p, preamble + text) <= tasks.PLAIN_WRONG_REWARD
    for ph in p.meta["placeholders"]:
        assert reward(p, text + ph) == 0.0


# ---------------------------------------------------------------------------------------------
# Preference pairs
# ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def pairs(splits):
    return {split: pp.make_preference_pairs(splits[split]) for split in tasks.SPLITS}


def test_pair_counts_match_the_lesson(pairs, splits):
    assert {s: len(v) for s, v in pairs.items()} == {"train": 1320, "validation": 330, "test": 330}
    for split, split_pairs in pairs.items():
        per_prompt = collections.Counter(pair["prompt_id"] for pair in split_pairs)
        assert set(per_prompt) == {p.id for p in splits[split]}
        assert set(per_prompt.values()) == {3, 4}


def test_every_rejected_answer_fails_and_every_chosen_passes(pairs, splits):
    prompts = {p.id: p for split in splits.values() for p in split}
    for split_pairs in pairs.values():
        seen = set()
        for pair in split_pairs:
            p = prompts[pair["prompt_id"]]
            assert pair["chosen"] == p.target and pair["prompt"] == p.prompt and pair["family"] == p.family
            assert tasks.check(p, pair["chosen"]).passed
            result = tasks.check(p, pair["rejected"])
            assert not result.passed and result.reason, pair
            assert reward(p, pair["rejected"]) < 1.0
            assert (pair["prompt_id"], pair["rejected"]) not in seen, pair
            seen.add((pair["prompt_id"], pair["rejected"]))


def test_pairs_cover_the_issues_kinds_in_every_split_and_stay_balanced(pairs):
    for split, split_pairs in pairs.items():
        kinds = collections.Counter(pair["kind"] for pair in split_pairs)
        assert ISSUE_PAIR_KINDS <= set(kinds), (split, ISSUE_PAIR_KINDS - set(kinds))
        for name in tasks.TASK_FAMILIES:
            per_kind = collections.Counter(pair["kind"] for pair in split_pairs if pair["family"] == name)
            assert max(per_kind.values()) - min(per_kind.values()) <= 1, (split, name, per_kind)


def test_foreign_format_answers_all_fail_and_stay_out_of_the_training_pairs(pairs, splits):
    for prompts in splits.values():
        for p in prompts:
            foreign = pp.foreign_format_answers(p)
            assert set(foreign) <= set(pp.FOREIGN_FORMAT_KINDS) and {"foreign_brackets", "foreign_json"} <= set(foreign)
            assert not set(foreign) & set(pp.wrong_answers(p)), p.family  # a sweep-only kind, not a pair kind
            for kind, text in foreign.items():
                assert not tasks.check(p, text).passed, (p.family, kind, text)
    assert pp.foreign_format_answers(splits["test"][0])["foreign_brackets"] == f"[{splits['test'][0].target}]"
    # The pairs the reward model trains on are still the committed ones.
    committed = tasks.default_data_dir() / "pairs_train.jsonl"
    assert [json.loads(line) for line in committed.read_text().splitlines()] == pairs["train"]


def test_pairs_do_not_depend_on_the_order_of_prompts(splits):
    prompts = splits["validation"]
    a = pp.make_preference_pairs(prompts)
    b = pp.make_preference_pairs(list(reversed(prompts)))
    key = lambda pair: (pair["prompt_id"], pair["kind"])  # noqa: E731
    assert sorted(a, key=key) == sorted(b, key=key)


# ---------------------------------------------------------------------------------------------
# data/ files
# ---------------------------------------------------------------------------------------------


def test_committed_data_is_exactly_what_write_data_produces(tmp_path):
    manifest = data_files.write_data(tmp_path)
    committed = tasks.default_data_dir()
    names = sorted(manifest["files"]) + ["manifest.json"]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(names)
    for name in names:
        assert (committed / name).read_bytes() == (tmp_path / name).read_bytes(), (
            f"data/{name} is stale: run `make data` and commit data/")


def test_manifest_counts_seed_and_hashes(tmp_path):
    manifest = data_files.write_data(tmp_path, seed=0)
    assert manifest == json.loads((tmp_path / "manifest.json").read_text())
    assert manifest["seed"] == 0 and manifest["families"] == list(tasks.TASK_FAMILIES)
    counts = {name: info["count"] for name, info in manifest["files"].items()}
    assert counts == {"train.jsonl": 400, "validation.jsonl": 100, "test.jsonl": 100,
                      "pairs_train.jsonl": 1320, "pairs_validation.jsonl": 330, "pairs_test.jsonl": 330,
                      "test_unseen.jsonl": 100}
    for name, info in manifest["files"].items():
        raw = (tmp_path / name).read_bytes()
        assert hashlib.sha256(raw).hexdigest() == info["sha256"]
        assert raw.count(b"\n") == info["count"]


def test_load_split_reads_back_what_make_split_made(splits, tmp_path, monkeypatch):
    for split in tasks.SPLITS:
        assert tasks.load_split(split) == splits[split]
    assert len(tasks.load_pairs("validation")) == 330
    data_files.write_data(tmp_path, seed=3)
    monkeypatch.setenv(tasks.DATA_ENV_VAR, str(tmp_path))
    assert tasks.load_split("test") == tasks.make_split("test", seed=3)
    monkeypatch.setenv(tasks.DATA_ENV_VAR, str(tmp_path / "missing"))
    with pytest.raises(FileNotFoundError, match="make data"):
        tasks.load_split("train")


# ---------------------------------------------------------------------------------------------
# The second held-out set: the test prompts in phrasings no training prompt uses
# ---------------------------------------------------------------------------------------------


def _skeleton(prompt) -> str:
    """The instruction with its content (numbers, words, keys) taken out."""
    text = prompt.prompt
    for item in sorted(map(str, [*prompt.meta.get("numbers", []), *prompt.meta.get("words", [])]), key=len, reverse=True):
        text = text.replace(item, "_").replace(item.upper(), "_")
    for word in tasks.number_to_words(prompt.meta["number"]).split() if "number" in prompt.meta else []:
        text = text.replace(word, "_")
    return re.sub(r"\d+", "_", text)


def test_the_unseen_split_asks_the_test_prompts_in_new_words():
    test, unseen = tasks.load_split("test"), tasks.load_split(tasks.UNSEEN_SPLIT)
    train_skeletons = {_skeleton(p) for p in tasks.load_split("train")}
    assert len(unseen) == len(test) and [u.target for u in unseen] == [t.target for t in test]
    for u, t in zip(unseen, test):
        assert u.family == t.family and u.prompt != t.prompt
        assert _skeleton(u) not in train_skeletons, u.prompt
        assert tasks.check(u, u.target).passed, u.prompt
        assert not tasks.check(u, u.prompt).passed  # echoing the new prompt is still caught
