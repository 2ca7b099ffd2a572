"""Tests of course_utils.reward_model (the lesson-6 reward model).

What is proved here, on a 2-layer BERT built from a config with the REAL MiniLM tokenizer:
- the Bradley-Terry loss equals -log sigma(r_c - r_r) computed independently (stable plain-math
  reference, hand-worked ln 2 at a zero margin) and has the gradient -(1 - sigma(margin));
- visible_text makes case and whitespace visible: the response can be rebuilt exactly from the
  tokens the model reads (property test), while the plain uncased tokenizer merges them;
- score() takes text and re-encodes it with the reward model's own tokenizer (not SmolLM2's);
- a few training steps on a handful of pairs lower the loss; save/load gives identical scores;
- the metrics (pairwise accuracy, ties, margin, point-biserial r) match plain loops / numpy;
- the command line parses and runs end to end on the tiny backbone.
"""

from __future__ import annotations

import json
import math
import random

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from course_utils import reward_model as rm
from course_utils.lesson_aids import reward_model_plots as rm_plots
from course_utils import tasks

PAIRS = [  # a handful of training pairs in the data's format
    {"prompt": "Add 23 and 41. Reply with one line: RESULT: <sum>", "chosen": "RESULT: 64", "rejected": "RESULT:64",
     "kind": "spacing", "family": "result_sum"},
    {"prompt": "Add 23 and 41. Reply with one line: RESULT: <sum>", "chosen": "RESULT: 64", "rejected": "RESULT: 66",
     "kind": "wrong_arithmetic", "family": "result_sum"},
    {"prompt": "Write the word PLANET in lowercase letters. Reply with the word only.", "chosen": "planet",
     "rejected": "Planet", "kind": "case_violation", "family": "lowercase_word"},
    {"prompt": "Is 14 an even number? Answer Yes or No only.", "chosen": "Yes", "rejected": "No",
     "kind": "wrong_label", "family": "yes_no_parity"},
    {"prompt": "Join these words with commas and no spaces: red, blue, green", "chosen": "red,blue,green",
     "rejected": "```\nred,blue,green\n```", "kind": "code_fence", "family": "comma_no_spaces"},
    {"prompt": "Write the word lemon inside square brackets. Reply with nothing else.", "chosen": "[lemon]",
     "rejected": "Sure! Here is the answer: [lemon]", "kind": "preamble", "family": "bracket_word"},
]


@pytest.fixture(scope="module")
def tiny_backbone(tmp_path_factory):
    """A 2-layer, 32-wide BERT with random weights, saved with the real MiniLM tokenizer."""
    from transformers import AutoTokenizer, BertConfig, BertModel

    folder = tmp_path_factory.mktemp("tiny_bert")
    tokenizer = AutoTokenizer.from_pretrained(rm.backbone_folder())
    torch.manual_seed(0)
    config = BertConfig(vocab_size=tokenizer.vocab_size, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=128)
    BertModel(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def tiny_model(backbone, response_format="visible", seed=0):
    torch.manual_seed(seed)
    return rm.build_reward_model(backbone, max_length=64, response_format=response_format, device="cpu")


# ---------------------------------------------------------------------------------------------
# The Bradley-Terry loss
# ---------------------------------------------------------------------------------------------


def bt_reference(chosen, rejected):
    """-log sigma(d) = log(1 + e^-d), written to stay finite for either sign of d."""
    total = 0.0
    for c, r in zip(chosen, rejected):
        d = c - r
        total += math.log1p(math.exp(-d)) if d >= 0 else -d + math.log1p(math.exp(d))
    return total / len(chosen)


def test_bt_loss_matches_plain_formula():
    rng = random.Random(0)
    chosen = [rng.uniform(-30, 30) for _ in range(50)] + [100.0, -100.0]
    rejected = [rng.uniform(-30, 30) for _ in range(50)] + [-100.0, 100.0]
    got = rm.bradley_terry_loss(torch.tensor(chosen, dtype=torch.float64), torch.tensor(rejected, dtype=torch.float64))
    assert got.item() == pytest.approx(bt_reference(chosen, rejected), rel=1e-12)
    # hand-worked: equal scores -> ln 2; margin ln 3 -> sigma = 3/4 -> loss ln(4/3)
    assert rm.bradley_terry_loss(torch.zeros(3), torch.zeros(3)).item() == pytest.approx(math.log(2))
    assert rm.bradley_terry_loss(torch.tensor([math.log(3)]), torch.zeros(1)).item() == pytest.approx(math.log(4 / 3))
    # a margin of -200 in float32 stays finite (log(sigmoid(-200)) would be -inf)
    assert torch.isfinite(rm.bradley_terry_loss(torch.tensor([-100.0]), torch.tensor([100.0])))


def test_bt_loss_gradient_is_minus_one_minus_sigma():
    margin = torch.tensor([-3.0, -0.5, 0.0, 0.5, 3.0], dtype=torch.float64, requires_grad=True)
    (rm.bradley_terry_loss(margin, torch.zeros_like(margin)) * len(margin)).backward()
    expected = [-(1 - 1 / (1 + math.exp(-m))) for m in margin.tolist()]
    assert margin.grad.tolist() == pytest.approx(expected, rel=1e-12)


def test_bt_loss_rejects_unpaired_scores():
    with pytest.raises(ValueError, match="pair up"):
        rm.bradley_terry_loss(torch.zeros(3), torch.zeros(2))


# ---------------------------------------------------------------------------------------------
# The reward model's own view of the text
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("text, expected", [
    ("planet", "planet"),
    ("Planet", " [CAP] planet"),
    ("PLANET", " [UPPER] planet"),
    ("pLaNet", " [MIXED] planet"),
    ("RESULT: 64", " [UPPER] result:[SP]64"),
    ("RESULT:64", " [UPPER] result:64"),
    ("1. red\n2. blue", "1.[SP]red[NL]2.[SP]blue"),
    ("  [lemon]\n", "[lemon]"),  # surrounding whitespace is stripped, as the checker does
    ("I", " [CAP] i"),
])
def test_visible_text_examples(text, expected):
    assert rm.visible_text(text) == expected


def rebuild(tokens: list[str]) -> str:
    """Invert the visible view: rebuild the response from the WordPiece tokens the model reads."""
    out, case, word = [], None, []

    def flush():  # end of a word: apply the pending case marker to it
        nonlocal case
        if word:
            w = "".join(word)
            out.append(w.upper() if case == "[UPPER]" else w.capitalize() if case == "[CAP]" else w)
            word.clear()
            case = None

    for tok in tokens:
        if tok.startswith("##"):
            word.append(tok[2:])
            continue
        flush()
        if tok in ("[CAP]", "[UPPER]"):
            case = tok
        elif tok in ("[SP]", "[NL]"):
            out.append(" " if tok == "[SP]" else "\n")
        else:
            word.append(tok)
    flush()
    return "".join(out)


WORD = st.one_of(st.text("abcdefghijklmnopqrstuvwxyz", min_size=1, max_size=8).flatmap(
    lambda w: st.sampled_from([w, w.capitalize(), w.upper() if len(w) > 1 else w])),
    st.integers(0, 999).map(str))
SEPARATOR = st.sampled_from([" ", "  ", ",", ", ", ":", ": ", "\n", ". ", " - ", "[", "]"])


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(words=st.lists(WORD, min_size=1, max_size=6), seps=st.lists(SEPARATOR, min_size=6, max_size=6))
def test_visible_view_keeps_case_and_spacing(tiny_backbone, words, seps):
    """What the model reads determines the (stripped) response exactly; the plain view does not."""
    from transformers import AutoTokenizer

    tokenizer = _visible_tokenizer(tiny_backbone)
    text = "".join(a + b for a, b in zip(words[:-1], seps)) + words[-1]
    assert rebuild(tokenizer.tokenize(rm.visible_text(text))) == text.strip()
    plain = AutoTokenizer.from_pretrained(tiny_backbone).tokenize(text)
    assert plain == AutoTokenizer.from_pretrained(tiny_backbone).tokenize(text.lower().replace(" ", "  "))


_TOKENIZERS = {}


def _visible_tokenizer(folder):
    if folder not in _TOKENIZERS:
        from transformers import AutoTokenizer

        tok = AutoTokenizer.from_pretrained(folder)
        tok.add_special_tokens({"additional_special_tokens": list(rm.MARKERS)})
        _TOKENIZERS[folder] = tok
    return _TOKENIZERS[folder]


def test_plain_view_cannot_see_case_or_spacing_but_visible_view_can(tiny_backbone):
    prompt = [PAIRS[0]["prompt"]]
    for good, bad in (("RESULT: 64", "RESULT:64"), ("planet", "Planet"), ("Yes", "yes"), ("[lemon]", "[ lemon ]")):
        plain, visible = tiny_model(tiny_backbone, "plain"), tiny_model(tiny_backbone, "visible")
        assert torch.equal(plain.encode(prompt, [good])["input_ids"], plain.encode(prompt, [bad])["input_ids"])
        assert not torch.equal(visible.encode(prompt, [good])["input_ids"], visible.encode(prompt, [bad])["input_ids"])


def test_encode_is_a_text_pair_and_respects_max_length(tiny_backbone):
    model = tiny_model(tiny_backbone)
    enc = model.encode(["Is 14 an even number?"], ["Yes"])
    tokens = model.tokenizer.convert_ids_to_tokens(enc["input_ids"][0])
    assert tokens == ["[CLS]", "is", "14", "an", "even", "number", "?", "[SEP]", "[CAP]", "yes", "[SEP]"]
    assert enc["token_type_ids"][0].tolist() == [0] * 8 + [1] * 3  # segment B is the response
    long = model.encode(["Is 14 an even number?"], ["Yes " * 200])
    assert long["input_ids"].shape[1] == model.max_length


# ---------------------------------------------------------------------------------------------
# Scoring text with its own tokenizer
# ---------------------------------------------------------------------------------------------


def test_score_reencodes_text_with_its_own_tokenizer(tiny_backbone, tiny_tokenizer):
    model = tiny_model(tiny_backbone)
    with torch.no_grad():
        model.head.weight.normal_()  # a nonzero head, so different inputs get different scores
    # the policy (SmolLM2) and the reward model do not share a vocabulary
    assert model.tokenizer.get_vocab() != tiny_tokenizer.get_vocab()
    prompts, responses = [p["prompt"] for p in PAIRS], [p["rejected"] for p in PAIRS]
    policy_ids = tiny_tokenizer(responses[0])["input_ids"]
    assert policy_ids != model.tokenizer(rm.visible_text(responses[0]), add_special_tokens=False)["input_ids"]
    # score() == the model applied to a fresh BERT encoding of the same text, built here by hand
    from transformers import AutoTokenizer

    bert = AutoTokenizer.from_pretrained(tiny_backbone)
    bert.add_special_tokens({"additional_special_tokens": list(rm.MARKERS)})
    by_hand = bert(prompts, [rm.visible_text(r) for r in responses], padding=True, return_tensors="pt")
    with torch.no_grad():
        expected = model(**by_hand)
    got = model.score(prompts, responses)
    assert got.dtype == torch.float32 and got.shape == (len(PAIRS),)
    torch.testing.assert_close(got, expected)
    # scores are per sequence: batching does not change them
    model.batch_size = 2
    torch.testing.assert_close(model.score(prompts, responses), expected, rtol=1e-5, atol=1e-6)
    # case and spacing change the score
    two = model.score([PAIRS[0]["prompt"]] * 2, ["RESULT: 64", "RESULT:64"])
    assert two[0] != two[1]


def test_score_refuses_token_ids(tiny_backbone, tiny_tokenizer):
    model = tiny_model(tiny_backbone)
    ids = tiny_tokenizer(["RESULT: 64"], return_tensors="pt")["input_ids"]
    with pytest.raises(TypeError, match="string"):
        model.score(["Add 23 and 41."], [ids[0]])
    with pytest.raises(TypeError, match="wrap it"):
        model.score("Add 23 and 41.", "RESULT: 64")
    with pytest.raises(ValueError, match="one response per prompt"):
        model.score(["a", "b"], ["x"])


def test_reward_model_is_a_reward_function(tiny_backbone):
    from course_utils import rewards

    assert isinstance(tiny_model(tiny_backbone), rewards.RewardFunction)


# ---------------------------------------------------------------------------------------------
# Training, saving, loading
# ---------------------------------------------------------------------------------------------


def pairs_loss(model, pairs):
    with torch.no_grad():
        return rm.bradley_terry_loss(*rm.pair_scores(model, pairs)).item()


def test_untrained_model_scores_zero_and_loss_is_ln2(tiny_backbone):
    model = tiny_model(tiny_backbone)
    assert torch.equal(model.score(["a"], ["b"]), torch.zeros(1))
    assert pairs_loss(model, PAIRS) == pytest.approx(math.log(2))


def test_a_few_training_steps_lower_the_loss(tiny_backbone):
    torch.set_num_threads(1)
    model = tiny_model(tiny_backbone)
    before = pairs_loss(model, PAIRS)
    history = rm.train_reward_model(model, PAIRS, rm.TrainSettings(epochs=10, batch_size=3, lr=1e-2), progress=False)
    assert history["steps"] == len(history["loss"]) >= 20  # >= 2 batches of <= 3 pairs per epoch
    after = pairs_loss(model, PAIRS)
    assert after < before - 0.1, (before, after)
    # deterministic: the same seed gives the same model
    again = tiny_model(tiny_backbone)
    rm.train_reward_model(again, PAIRS, rm.TrainSettings(epochs=10, batch_size=3, lr=1e-2), progress=False)
    torch.testing.assert_close(again.score([p["prompt"] for p in PAIRS], [p["chosen"] for p in PAIRS]),
                               model.score([p["prompt"] for p in PAIRS], [p["chosen"] for p in PAIRS]))


def test_pair_scores_encode_a_shared_chosen_answer_once_with_the_same_result(tiny_backbone):
    model = tiny_model(tiny_backbone)
    with torch.no_grad():
        model.head.weight.normal_()
    encoded = []
    original = model.encode
    model.encode = lambda prompts, responses: encoded.append(len(prompts)) or original(prompts, responses)
    with torch.no_grad():
        chosen, rejected = rm.pair_scores(model, PAIRS)
    assert encoded == [len(PAIRS) * 2 - 1]  # PAIRS[0] and PAIRS[1] share prompt and chosen answer
    for i, p in enumerate(PAIRS):  # one pair at a time, nothing shared
        with torch.no_grad():
            both = model(**original([p["prompt"]] * 2, [p["chosen"], p["rejected"]]))
        torch.testing.assert_close(torch.stack([chosen[i], rejected[i]]), both, rtol=1e-5, atol=1e-6)


def test_prompt_batches_cover_every_pair_once_and_keep_prompts_together():
    pairs = tasks.load_pairs("validation")
    batches = rm.prompt_batches(pairs, 16, torch.Generator().manual_seed(0))
    flat = [p for b in batches for p in b]
    assert sorted(map(json.dumps, flat)) == sorted(map(json.dumps, pairs))
    assert all(len(b) <= 16 for b in batches)
    home = {}
    for i, b in enumerate(batches):
        for p in b:
            assert home.setdefault(p["prompt_id"], i) == i  # a prompt never straddles two batches
    again = rm.prompt_batches(pairs, 16, torch.Generator().manual_seed(0))
    assert again == batches


def test_save_load_round_trip_gives_identical_scores(tiny_backbone, tmp_path):
    model = tiny_model(tiny_backbone)
    rm.train_reward_model(model, PAIRS, rm.TrainSettings(epochs=1, batch_size=3, lr=3e-3), progress=False)
    model.save(tmp_path / "rm")
    loaded = rm.load_reward_model(tmp_path / "rm")
    prompts, texts = [p["prompt"] for p in PAIRS], [p["rejected"] for p in PAIRS] + [" RESULT: 64 \n"]
    prompts = prompts + [PAIRS[0]["prompt"]]
    assert torch.equal(loaded.score(prompts, texts), model.score(prompts, texts))
    saved = json.loads((tmp_path / "rm" / rm.CONFIG_NAME).read_text())
    assert saved["pooling"] == "mean" and saved["max_length"] == 64 and saved["response_format"] == "visible"
    assert not any(p.requires_grad for p in loaded.parameters())


def test_load_names_the_fix_when_the_folder_is_empty(tmp_path):
    with pytest.raises(FileNotFoundError, match="rm train"):
        rm.load_reward_model(tmp_path)


def test_make_reward_loads_a_trained_folder(tiny_backbone, tmp_path):
    from course_utils.config import PPOConfig

    model = tiny_model(tiny_backbone)
    rm.train_reward_model(model, PAIRS, rm.TrainSettings(epochs=1, batch_size=3, lr=3e-3), progress=False)
    model.save(tmp_path / "rm")
    loaded = rm.make_reward(PPOConfig(reward="learned", reward_model_path=str(tmp_path / "rm")), device="cpu")
    prompts, texts = [p["prompt"] for p in PAIRS], [p["chosen"] for p in PAIRS]
    assert torch.equal(loaded.score(prompts, texts), model.score(prompts, texts))


# ---------------------------------------------------------------------------------------------
# Metrics
# ---------------------------------------------------------------------------------------------


def test_pairwise_metrics_match_a_plain_loop():
    rng = random.Random(1)
    chosen = [rng.choice([0.0, 1.0, 2.0, -1.0]) for _ in range(40)]
    rejected = [rng.choice([0.0, 1.0, 2.0]) for _ in range(40)]
    kinds = [rng.choice("abc") for _ in range(40)]
    got = rm.pairwise_metrics(chosen, rejected, kinds)
    wins = sum(c > r for c, r in zip(chosen, rejected))
    assert got["accuracy"] == pytest.approx(wins / 40)  # a tie is not a win
    assert got["ties"] == sum(c == r for c, r in zip(chosen, rejected))
    assert got["mean_margin"] == pytest.approx(sum(c - r for c, r in zip(chosen, rejected)) / 40)
    for k in "abc":
        idx = [i for i in range(40) if kinds[i] == k]
        assert got["groups"][k]["n"] == len(idx)
        assert got["groups"][k]["accuracy"] == pytest.approx(sum(chosen[i] > rejected[i] for i in idx) / len(idx))


def test_point_biserial_equals_pearson_with_a_zero_one_label():
    rng = np.random.default_rng(0)
    scores = rng.normal(size=30)
    passed = rng.random(30) < 0.3
    assert rm.point_biserial(scores.tolist(), passed.tolist()) == pytest.approx(
        np.corrcoef(scores, passed.astype(float))[0, 1], rel=1e-10)
    assert math.isnan(rm.point_biserial([1.0, 2.0], [True, True]))  # no failures: undefined


class FixedScores:
    """A stand-in reward model that returns given scores (to test the bookkeeping alone)."""

    def __init__(self, values):
        self.values = torch.tensor(values, dtype=torch.float32)

    def score(self, prompts, responses, records=None):
        return self.values[: len(responses)]


def test_checker_agreement_bookkeeping():
    records = tasks.load_split("test")[:4]
    answers = [records[0].target, "nonsense", records[2].target, "```\n" + records[3].target + "\n```"]
    out = rm.checker_agreement(FixedScores([2.0, -1.0, 4.0, 0.0]), records, answers)
    assert out["passed"] == 2
    assert out["mean_score_pass"] == pytest.approx(3.0) and out["mean_score_fail"] == pytest.approx(-0.5)
    assert out["point_biserial"] == pytest.approx(np.corrcoef([2, -1, 4, 0], [1, 0, 1, 0])[0, 1])
    assert [a["passed"] for a in out["answers"]] == [True, False, True, False]
    assert out["by_tier"]["pass"] == {"n": 2, "mean_score": pytest.approx(3.0)}
    assert out["by_tier"]["buried"] == {"n": 1, "mean_score": pytest.approx(0.0)}  # the code-fenced answer
    assert [f["answer"] for f in out["top_scored_failures"]] == [answers[3], "nonsense"]


def test_length_probe_paddings_fail_the_checker_except_whitespace(tiny_backbone):
    records = tasks.load_split("test")[:10]
    for r in records:
        padded = rm.padded_answers(r.target)
        assert not any(tasks.check(r, padded[k]).passed for k in ("filler_x1", "filler_x4", "repeated"))
        assert tasks.check(r, padded["trailing_newlines"]).passed
    out = rm.length_probe(tiny_model(tiny_backbone), records)
    assert out["trailing_newlines"]["mean_delta"] == 0.0  # stripped like the checker does
    assert out["filler_x1"]["checker_passes"] == 0


# ---------------------------------------------------------------------------------------------
# Command line
# ---------------------------------------------------------------------------------------------


def test_cli_parses_through_the_package_entry_point(monkeypatch):
    from course_utils import __main__ as cli

    seen = []
    monkeypatch.setattr(rm, "main", seen.append)  # the entry point hands the rest of the line over
    cli.main(["rm", "train", "--epochs", "3", "--out", "somewhere", "--max-pairs", "50"])
    sub = rm.build_parser().parse_args(seen[0])
    got = (sub.action, sub.epochs, sub.out, sub.max_pairs, sub.response_format)
    assert got == ("train", 3, "somewhere", 50, "visible")
    sub = rm.build_parser().parse_args(["eval", "--no-policy", "--summary", "x.json"])
    assert sub.no_policy and sub.summary == "x.json"
    with pytest.raises(SystemExit):
        rm.build_parser().parse_args(["train", "--pooling", "max"])


def test_cli_train_and_eval_end_to_end(tiny_backbone, tmp_path, capsys):
    out = tmp_path / "rm"
    metrics = rm.main(["train", "--backbone", str(tiny_backbone), "--out", str(out), "--max-pairs", "8",
                       "--epochs", "1", "--batch-size", "4", "--max-length", "48", "--no-progress", "--threads", "1"])
    assert (out / rm.METRICS_NAME).is_file() and (out / rm.HEAD_NAME).is_file()
    assert metrics["train"]["pairs"] == 8 and metrics["train"]["steps"] == len(metrics["train"]["loss_curve"])
    assert metrics["test_pairs"]["n"] == len(tasks.load_pairs("test"))
    assert set(metrics["test_pairs"]["per_kind"]) == {p["kind"] for p in tasks.load_pairs("test")}
    assert "test pairs: accuracy" in capsys.readouterr().out
    summary = tmp_path / "summary.json"
    again = rm.main(["eval", "--model", str(out), "--no-policy", "--summary", str(summary), "--no-progress",
                     "--threads", "1", "--compare", str(out)])
    assert again["comparison"]["test_pairs"]["accuracy"] == pytest.approx(again["test_pairs"]["accuracy"])
    assert json.loads(summary.read_text())["test_pairs"] == again["test_pairs"]
    assert again["test_pairs"]["accuracy"] == pytest.approx(metrics["test_pairs"]["accuracy"])


# ---------------------------------------------------------------------------------------------
# Lesson-6 plots: the drawn artists read back (by gid) against independent references
# ---------------------------------------------------------------------------------------------


def gid_artists(ax, gid):
    found = [a for a in [*ax.lines, *ax.patches, *ax.collections] if a.get_gid() == gid]
    assert found, f"no artist with gid {gid!r}"
    return found


def test_content_kinds_are_kinds_of_the_data_and_keep_the_form():
    kinds = {p["kind"] for p in tasks.load_pairs("test")}
    assert set(rm.CONTENT_KINDS) <= kinds
    # a content error keeps the bare shape of an answer: the checker never calls it "buried" or a code fence
    records = {r.id: r for r in tasks.load_split("test")}
    for p in tasks.load_pairs("test"):
        if p["kind"] in rm.CONTENT_KINDS:
            assert tasks.check(records[p["prompt_id"]], p["rejected"]).tier in ("plain_wrong", "partial"), p


def test_bradley_terry_plot_draws_softplus_and_its_slope():
    margins = np.linspace(-6, 6, 49)
    fig = rm_plots.plot_bradley_terry_loss(margins)
    left, right = fig.axes
    (loss,) = gid_artists(left, "loss")
    x, y = np.asarray(loss.get_xdata()), np.asarray(loss.get_ydata())
    np.testing.assert_allclose(x, margins)
    np.testing.assert_allclose(y, np.logaddexp(0.0, -margins), rtol=1e-12)  # -log sigma(d) = log(1 + e^-d)
    (point,) = gid_artists(left, "ln 2")
    assert point.get_ydata()[0] == pytest.approx(math.log(2))
    (grad,) = gid_artists(right, "gradient")
    np.testing.assert_allclose(np.asarray(grad.get_ydata()), -1.0 / (1.0 + np.exp(margins)), atol=1e-12)
    with pytest.raises(ValueError, match="1-D"):
        rm_plots.plot_bradley_terry_loss([0.0])


def test_training_history_plot_draws_the_steps_and_a_trailing_mean():
    history = {"loss": [0.69, 0.6, 0.5, 0.4, 0.3], "accuracy": [0.0, 0.5, 1.0, 1.0, 0.5]}
    fig = rm_plots.plot_training_history(history, window=2)
    left, right = fig.axes
    (raw,) = gid_artists(left, "loss")
    np.testing.assert_allclose(raw.get_ydata(), history["loss"])
    np.testing.assert_allclose(raw.get_xdata(), [1, 2, 3, 4, 5])
    (mean,) = gid_artists(left, "loss mean")
    np.testing.assert_allclose(mean.get_ydata(), [0.69, 0.645, 0.55, 0.45, 0.35])  # by hand, window 2
    (ln2,) = gid_artists(left, "ln 2")
    assert ln2.get_ydata()[0] == pytest.approx(math.log(2))
    (acc_mean,) = gid_artists(right, "accuracy mean")
    np.testing.assert_allclose(acc_mean.get_ydata(), [0.0, 0.25, 0.75, 1.0, 0.75])
    with pytest.raises(ValueError, match="equally long"):
        rm_plots.plot_training_history({"loss": [1.0], "accuracy": []})


def test_pairwise_by_kind_plot_sorts_colours_and_marks_the_reference():
    per_kind = {"spacing": {"n": 4, "accuracy": 0.75, "mean_margin": 1.0},
                "wrong_arithmetic": {"n": 5, "accuracy": 0.4, "mean_margin": -0.1},
                "code_fence": {"n": 6, "accuracy": 1.0, "mean_margin": 3.0}}
    reference = {"wrong_arithmetic": {"accuracy": 0.6, "mean_margin": 0.0}}
    fig = rm_plots.plot_pairwise_by_kind(per_kind, reference)
    acc_ax, margin_ax = fig.axes
    bars = sorted(gid_artists(acc_ax, "form") + gid_artists(acc_ax, "content"), key=lambda b: b.get_y())
    # barh draws from the bottom: best at the bottom, worst at the top
    assert [b.get_width() for b in bars] == [1.0, 0.75, 0.4]
    assert [b.get_gid() for b in bars] == ["form", "form", "content"]
    labels = [t.get_text() for t in acc_ax.get_yticklabels()]
    assert labels == ["code_fence (n=6)", "spacing (n=4)", "wrong_arithmetic (n=5)"]
    margins = sorted(gid_artists(margin_ax, "form") + gid_artists(margin_ax, "content"), key=lambda b: b.get_y())
    assert [b.get_width() for b in margins] == [3.0, 1.0, -0.1]
    (ref,) = gid_artists(acc_ax, "reference")
    assert list(ref.get_xdata()) == [0.6] and list(ref.get_ydata()) == [2]
    with pytest.raises(ValueError, match="per_kind"):
        rm_plots.plot_pairwise_by_kind({})


def test_scores_by_verdict_histograms_count_every_answer_once():
    rng = np.random.default_rng(3)
    scores = rng.normal(size=40)
    passed = rng.random(40) < 0.25
    tiers = ["pass" if p else rng.choice(["nothing", "plain_wrong", "buried"]) for p in passed]
    fig = rm_plots.plot_scores_by_verdict(scores, passed, tiers, bins=8)
    hist_ax, tier_ax = fig.axes
    edges = np.histogram_bin_edges(scores, bins=8)
    for name, flag in (("pass", True), ("fail", False)):
        heights = [p.get_height() for p in gid_artists(hist_ax, name)]
        np.testing.assert_array_equal(heights, np.histogram(scores[passed == flag], bins=edges)[0])
        (mean,) = gid_artists(hist_ax, f"mean {name}")
        assert mean.get_xdata()[0] == pytest.approx(scores[passed == flag].mean())
    for tier in set(tiers):
        (points,) = gid_artists(tier_ax, f"tier {tier}")
        assert sorted(points.get_xdata()) == sorted(s for s, t in zip(scores, tiers) if t == tier)
    # the rows follow the checker's order, best first
    shown = [t.get_text().split(" ")[0] for t in tier_ax.get_yticklabels()]
    assert shown == [t for t in rm_plots.TIER_ORDER if t in set(tiers)]
    assert tier_ax.yaxis_inverted()  # drawn top-down: pass first
    with pytest.raises(ValueError, match="one pass/fail flag per score"):
        rm_plots.plot_scores_by_verdict([1.0, 2.0], [True])


def test_scores_by_verdict_draws_the_passing_bars_over_the_failing_ones():
    # Issue 35 (6b's figure 31): 5 passes and 5 failures in the same top bin showed as one brown bar.
    scores = np.array([1.6] * 5 + [1.6] * 5 + [-1.6] * 20)
    passed = np.array([True] * 5 + [False] * 25)
    fig = rm_plots.plot_scores_by_verdict(scores, passed, bins=8)
    (hist_ax,) = fig.axes
    passes, fails = gid_artists(hist_ax, "pass"), gid_artists(hist_ax, "fail")
    assert min(p.get_zorder() for p in passes) > max(p.get_zorder() for p in fails)


def test_length_probe_plot_draws_one_bar_per_padding():
    probe = {"n": 10, "mean_score_correct": 1.0,
             "filler_x1": {"mean_delta": -2.0, "fraction_higher": 0.1, "checker_passes": 0, "example": "x"},
             "trailing_newlines": {"mean_delta": 0.0, "fraction_higher": 0.0, "checker_passes": 10, "example": "x"}}
    fig = rm_plots.plot_length_probe(probe)
    (ax,) = fig.axes
    assert [b.get_height() for b in gid_artists(ax, "mean delta")] == [-2.0, 0.0]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["filler_x1", "trailing_newlines"]
    notes = [t.get_text() for t in ax.texts]
    assert notes == ["higher: 10%\npasses: 0/10", "higher: 0%\npasses: 10/10"]
    with pytest.raises(ValueError, match="length_probe"):
        rm_plots.plot_length_probe({"n": 3})


def test_longer_correct_answers_still_pass_and_are_scored_against_the_gold(tiny_backbone):
    import json

    records = tasks.load_split("test")
    model = tiny_model(tiny_backbone)
    out = rm.longer_correct_probe(model, records)
    jsons = [r for r in records if r.family == "json_object"]
    assert out["n"] == len(jsons) and out["checker_passes"] == len(jsons)  # longer, and still correct
    longer = [json.dumps(json.loads(r.target), indent=2) for r in jsons]
    by_hand = (model.score([r.prompt for r in jsons], longer) - model.score([r.prompt for r in jsons],
                                                                           [r.target for r in jsons])).mean().item()
    assert out["mean_delta"] == pytest.approx(by_hand, abs=1e-6) and out["mean_extra_chars"] > 0
    with pytest.raises(ValueError, match="json_object"):
        rm.longer_correct_probe(model, [r for r in records if r.family == "number_only"])
