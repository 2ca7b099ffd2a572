"""Lesson 11's verdicts, recomputed from the committed runs by the interval rule.

Every verdict the lesson's prose relies on is recomputed here from ``runs/example/rlhf_learning.json`` and
``runs/example/when_ppo_wins.json`` with ``capstone.compare`` (paired t-interval at n − 1 degrees of freedom:
"A ahead" only when the 95 % interval excludes 0, otherwise "level within noise"), and checked three ways:

- the verdict words are the ones the lesson uses, so a changed JSON or a changed rule breaks the test;
- the sentence ``Comparison.sentence`` prints is in the notebook's stored outputs, so the committed notebook
  was executed on these numbers;
- the verdict the old rule gave ("a winner beyond two standard errors") is recorded beside it: with three
  seeds that rule calls several of these comparisons a win, and the lesson no longer may (the last column;
  ``test_the_old_two_standard_error_rule_gives_other_verdicts`` fails if the two rules ever agree everywhere).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from course_utils.comparison import rl_after_sft as d1
from course_utils.lesson_aids import capstone

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = ROOT / "notebooks" / "week11_when_is_ppo_worth_it.ipynb"
MEASURED = capstone.load_measurements()
PIPE = MEASURED["pipeline"]["arms"]
DESIGNS = MEASURED["designs"]
G = DESIGNS["g_no_demonstrations"]["arms"]
H = DESIGNS["h_retention"]["arms"]
LEVELS = {split: capstone.noise_levels(DESIGNS["f_noisy_teacher"], split, clean_arms=PIPE)
          for split in ("test", "test_unseen")}
NAMES = {"sft_full": "plain SFT", "sft_filtered": "filtered SFT", "sft_ppo_checker": "PPO (checker)",
         "sft_ppo_learned_rm": "PPO (learned RM)", "sft_warm_up": "the warm-up"}  # section 4's printout


def f(a: str, b: str, rate: float, split: str = "test"):
    """Design (f): arm kind ``a`` against ``b`` at one noise level, with the names section 4 prints."""
    return LEVELS[split][a][rate], LEVELS[split][b][rate], NAMES[a], NAMES[b]


def g(control: str, key: str, name: str):
    return G["sft_ppo_checker_nodemo"][key], G[control][key], "PPO", name


# (what the lesson says, (A per seed, B per seed, A's name, B's name), its verdict, the old 2-SE rule's verdict)
CLAIMS = [
    ("§1 the SFT control is ahead of warm-up + PPO on the main set",
     (PIPE["sft_full"]["test"], PIPE["sft_ppo_checker"]["test"], "SFT control", "warm-up + PPO"),
     "SFT control ahead", "SFT control ahead"),
    ("§1 ... and on the unseen phrasings",
     (PIPE["sft_full"]["test_unseen"], PIPE["sft_ppo_checker"]["test_unseen"], "SFT control", "warm-up + PPO"),
     "SFT control ahead", "SFT control ahead"),
    ("§3 PPO is ahead of the SFT control on the uncovered families", g("sft_full_nodemo", "test_nodemo", "SFT control"),
     "PPO ahead", "PPO ahead"),
    ("§3 ... and on their unseen phrasings", g("sft_full_nodemo", "test_unseen_nodemo", "SFT control"),
     "PPO ahead", "PPO ahead"),
    ("§3 PPO and the SFT control are level over all 100 prompts", g("sft_full_nodemo", "test", "SFT control"),
     "level within noise", "level within noise"),
    ("§3 PPO and filtered SFT are level on the uncovered families", g("sft_filtered_nodemo", "test_nodemo", "filtered SFT"),
     "level within noise", "level within noise"),
    ("§3 filtered SFT is ahead on their unseen phrasings", g("sft_filtered_nodemo", "test_unseen_nodemo", "filtered SFT"),
     "filtered SFT ahead", "filtered SFT ahead"),
    ("§3 filtered SFT is ahead on the covered families", g("sft_filtered_nodemo", "test_demo", "filtered SFT"),
     "filtered SFT ahead", "filtered SFT ahead"),
    ("§3 filtered SFT is ahead over all 100 prompts", g("sft_filtered_nodemo", "test", "filtered SFT"),
     "filtered SFT ahead", "filtered SFT ahead"),
    ("§4 at 0.75 PPO is ahead of plain SFT", f("sft_ppo_checker", "sft_full", 0.75), "PPO (checker) ahead",
     "PPO (checker) ahead"),
    ("§4 at 0.75 they are level on the unseen phrasings", f("sft_ppo_checker", "sft_full", 0.75, "test_unseen"),
     "level within noise", "level within noise"),
    ("§4 at 0.5 PPO and plain SFT are level", f("sft_ppo_checker", "sft_full", 0.5), "level within noise",
     "level within noise"),
    ("§4 at 0.25 plain SFT is ahead of PPO", f("sft_ppo_checker", "sft_full", 0.25), "plain SFT ahead",
     "plain SFT ahead"),
    ("§4 at 0.25 they are level on the unseen phrasings", f("sft_ppo_checker", "sft_full", 0.25, "test_unseen"),
     "level within noise", "level within noise"),
    ("§4 filtered SFT is ahead of PPO at 0.25", f("sft_ppo_checker", "sft_filtered", 0.25), "filtered SFT ahead",
     "filtered SFT ahead"),
    # The old rule called these two a win for filtered SFT (-17.3 ± 4.8 and -12.7 ± 3.8: 3.6 and 3.3 SE < 4.30).
    ("§4 PPO and filtered SFT are level at 0.5", f("sft_ppo_checker", "sft_filtered", 0.5), "level within noise",
     "filtered SFT ahead"),
    ("§4 PPO and filtered SFT are level at 0.75", f("sft_ppo_checker", "sft_filtered", 0.75), "level within noise",
     "filtered SFT ahead"),
    ("§4 PPO and filtered SFT are level on the unseen phrasings at 0.25",
     f("sft_ppo_checker", "sft_filtered", 0.25, "test_unseen"), "level within noise", "level within noise"),
    ("§4 ... at 0.5", f("sft_ppo_checker", "sft_filtered", 0.5, "test_unseen"), "level within noise",
     "level within noise"),
    ("§4 ... at 0.75", f("sft_ppo_checker", "sft_filtered", 0.75, "test_unseen"), "level within noise",
     "level within noise"),
    # The learned reward model against the checker: the old rule called 0 and 0.5 for the checker (2.4 and 2.1 SE).
    ("§4 PPO on the learned RM and on the checker are level at 0", f("sft_ppo_learned_rm", "sft_ppo_checker", 0.0),
     "level within noise", "PPO (checker) ahead"),
    ("§4 PPO on the checker is ahead of PPO on the learned RM at 0.25",
     f("sft_ppo_learned_rm", "sft_ppo_checker", 0.25), "PPO (checker) ahead", "PPO (checker) ahead"),
    ("§4 ... level at 0.5", f("sft_ppo_learned_rm", "sft_ppo_checker", 0.5), "level within noise",
     "PPO (checker) ahead"),
    ("§4 ... level at 0.75", f("sft_ppo_learned_rm", "sft_ppo_checker", 0.75), "level within noise",
     "level within noise"),
    ("§4 PPO on the learned RM is ahead of plain SFT at 0.75", f("sft_ppo_learned_rm", "sft_full", 0.75),
     "PPO (learned RM) ahead", "PPO (learned RM) ahead"),
    ("§4 PPO on the learned RM and plain SFT are level at 0.5", f("sft_ppo_learned_rm", "sft_full", 0.5),
     "level within noise", "level within noise"),
    ("§4 PPO on the learned RM is level with its warm-up at 0.25", f("sft_ppo_learned_rm", "sft_warm_up", 0.25),
     "level within noise", "PPO (learned RM) ahead"),
    ("§5 the gain on the trained families is level",
     (H["sft_ppo_checker_retention"]["gain_trained"], H["sft_continue_retention"]["gain_trained"], "PPO", "SFT"),
     "level within noise", "level within noise"),
    ("§5 the change on the other six is level",
     (H["sft_ppo_checker_retention"]["change_others"], H["sft_continue_retention"]["change_others"], "PPO", "SFT"),
     "level within noise", "level within noise"),
    # The 0% point: one run of the untrained model against three PPO seeds (Welch); 4.3 SE, a win by the old rule.
    ("§7 at 0% PPO and the instruct model are level", (PIPE["ppo_instruct"]["test"], PIPE["base"]["test"], "PPO",
                                                       "no training"), "level within noise", "PPO ahead"),
    ("§7 at 80% filtered SFT is ahead of plain SFT",
     (G["sft_filtered_nodemo"]["test"], G["sft_full_nodemo"]["test"], "filtered SFT", "SFT"),
     "filtered SFT ahead", "filtered SFT ahead"),
    # RLOO's gain over its warm-up on the main set: 2.6 SE, a win by the old rule.
    ("§8 the RLOO arm's gain over its warm-up is level on the main set",
     (PIPE["sft_ppo_checker_target_kl_4samples_rloo"]["test"], PIPE["sft"]["test"], "RLOO arm", "its warm-up"),
     "level within noise", "RLOO arm ahead"),
    ("§8 ... and ahead on the unseen phrasings",
     (PIPE["sft_ppo_checker_target_kl_4samples_rloo"]["test_unseen"], PIPE["sft"]["test_unseen"], "RLOO arm",
      "its warm-up"), "RLOO arm ahead", "RLOO arm ahead"),
]
IDS = [claim[0] for claim in CLAIMS]


def old_rule(result: capstone.Comparison, a: str, b: str) -> str:
    """The verdict lesson 11 used to print: a winner wherever |difference| > 2 standard errors."""
    if abs(result.difference) <= 2 * result.se:
        return "level within noise"
    return f"{a} ahead" if result.difference > 0 else f"{b} ahead"


def stored_text() -> str:
    """Every text the committed notebook's code cells printed or displayed."""
    texts = []
    for cell in json.loads(NOTEBOOK.read_text())["cells"]:
        for output in cell.get("outputs", []):
            texts.append("".join(output.get("text", "")))
            data = output.get("data", {})
            texts.append("".join(data.get("text/markdown", "")))
    return "\n".join(texts)


def markdown_text() -> str:
    """The lesson's prose, with every run of white space made one space (line breaks fall anywhere)."""
    return " ".join(" ".join("".join(c["source"]) for c in json.loads(NOTEBOOK.read_text())["cells"]
                             if c["cell_type"] == "markdown").split())


@pytest.mark.parametrize("claim", CLAIMS, ids=IDS)
def test_each_verdict_the_lesson_states_follows_the_interval_rule(claim):
    _, (a, b, a_name, b_name), said, _ = claim
    assert capstone.compare(a, b).verdict(a_name, b_name) == said


@pytest.mark.parametrize("claim", CLAIMS, ids=IDS)
def test_the_committed_notebook_printed_the_recomputed_sentence(claim):
    _, (a, b, a_name, b_name), _, _ = claim
    assert capstone.compare(a, b).sentence(a_name, b_name) in stored_text()


@pytest.mark.parametrize("claim", CLAIMS, ids=IDS)
def test_what_the_old_two_standard_error_rule_said(claim):
    _, (a, b, a_name, b_name), _, old = claim
    assert old_rule(capstone.compare(a, b), a_name, b_name) == old


def test_the_old_two_standard_error_rule_gives_other_verdicts():
    """Under the old rule the lesson would have to say "ahead" in at least these six places."""
    changed = [claim[0] for claim in CLAIMS if claim[2] != claim[3]]
    assert len(changed) >= 6, changed
    for _, (a, b, a_name, b_name), said, old in CLAIMS:
        result = capstone.compare(a, b)
        if said != old:  # beyond two standard errors, yet the 95 % interval holds 0
            assert abs(result.difference) > 2 * result.se and result.low < 0 < result.high


def test_the_levels_together_take_the_seed_as_the_unit():
    """Section 4's lines for the noisy levels together. A seed's levels share its data and its demonstrations,
    so the (level, seed) pairs (9 of 9, 11 of 12) are only counted; the verdict comes from each seed's difference
    averaged over the levels, by the interval rule on 3 seeds (2 degrees of freedom). The old pooled sign test over
    the pairs ("p = 0.004", each seed counted once per level) is gone from the lesson."""
    filtered = capstone.pooled_over_levels([f("sft_ppo_checker", "sft_filtered", r)[:2] for r in capstone.NOISE_RATES])
    assert (filtered["behind"], filtered["pairs"], filtered["seeds"]) == (9, 9, 3)
    assert filtered["by_seed"].df == 2
    assert filtered["by_seed"].verdict("PPO (checker)", "filtered SFT") == "filtered SFT ahead"
    judge = capstone.pooled_over_levels([f("sft_ppo_learned_rm", "sft_ppo_checker", r)[:2]
                                         for r in (0.0, *capstone.NOISE_RATES)])
    assert (judge["behind"], judge["pairs"]) == (11, 12)
    assert judge["by_seed"].verdict("PPO (learned RM)", "PPO (checker)") == "level within noise"
    prose, printed = markdown_text(), stored_text()
    for pooled, a, b in ((filtered, "PPO (checker)", "filtered SFT"), (judge, "PPO (learned RM)", "PPO (checker)")):
        assert (f"behind in {pooled['behind']}, ahead in {pooled['ahead']}, tied in {pooled['tied']} of the "
                f"{pooled['pairs']} (level, seed) pairs; averaged over the levels within each seed: "
                f"{pooled['by_seed'].sentence(a, b)}") in printed
    assert "9 of 9 (level, seed) pairs" in prose and "11 of the 12 (level, seed) pairs" in prose
    assert "p = 0.004" not in prose and "p = 0.006" not in prose and "sign test p" not in printed


def test_section_5_kl_is_lower_for_ppo_and_the_target_effect_lies_inside_the_forgetting_interval():
    ppo, sft = H["sft_ppo_checker_retention"], H["sft_continue_retention"]
    for key in ("kl_trained", "kl_others"):
        assert capstone.compare(ppo[key], sft[key]).high < 0  # "PPO lower", by the interval
    change = capstone.compare(ppo["change_others"], sft["change_others"])
    half_of_sfts_loss = -sum(sft["change_others"]) / len(sft["change_others"]) / 2
    assert change.low < half_of_sfts_loss < change.high  # "three seeds cannot rule out a halving"


def test_no_ppo_arm_is_ahead_of_its_best_sft_control():
    """The decision guide says plainly that no PPO arm beat its best SFT control, on the main set or on the
    unseen phrasings, in sections 1, 3, 4 and 5."""
    results = [capstone.compare(arm[split], PIPE["sft_full"][split]) for name, arm in PIPE.items()
               if name.startswith("sft_ppo") for split in ("test", "test_unseen")]
    results += [capstone.compare(G["sft_ppo_checker_nodemo"][key], G["sft_filtered_nodemo"][key])
                for key in ("test_nodemo", "test_unseen_nodemo", "test_demo", "test")]
    results += [capstone.compare(*f(kind, "sft_filtered", r, split)[:2]) for kind in ("sft_ppo_checker",
                                                                                      "sft_ppo_learned_rm")
                for r in capstone.NOISE_RATES for split in ("test", "test_unseen")]
    results += [capstone.compare(H["sft_ppo_checker_retention"][k], H["sft_continue_retention"][k])
                for k in ("gain_trained", "change_others")]
    assert not [r for r in results if r.winner() == "A"]
    assert f"{len(results)} comparisons): PPO ahead in 0," in stored_text()


def test_design_1_is_reported_only_as_far_as_its_preregistered_rule_goes():
    design = DESIGNS.get(d1.DESIGN, {"seeds": {}})
    lines = d1.decide(design)
    printed = stored_text()
    for line in lines:
        x, a = line["comparison"].split(" - ")
        result = capstone.compare(line[x], line[a])
        if len(line["seeds"]) < d1.SEEDS:
            assert line["decision"] == f"not decided: {len(line['seeds'])} of {d1.SEEDS} seeds"
            # before the rule can decide, the lesson prints the numbers without the interval's verdict
            shown = line["line"] if len(line["seeds"]) < 2 else result.record(x, a)
            assert line["line"] == shown  # d1.decide itself (and the `design1 decide` command) gives no verdict yet
            assert f"  {shown}  ->  {line['decision']}\n" in printed
        else:
            assert f"  {result.sentence(x, a)}  ->  {line['decision']}\n" in printed
    prose = " ".join(markdown_text().split())
    if any(len(line["seeds"]) < d1.SEEDS for line in lines) or not lines:
        # the prose promises no result before the rule gives one
        assert "no single seed's numbers are a result" in prose
        return
    # decided: the section says "decided", and the reading names each verdict the rule gave, in the lesson's words
    assert "(design 1, pre-registered, decided)" in prose
    words = {"rejection sampling stays the frontier at 3x the budget": "*rejection sampling stays the frontier at 3× the budget*",
             "level within noise": "*level within noise*", "RL adds after the best SFT": "*RL adds after the best SFT*"}
    for line in lines:
        decision = line["decision"].split(" (")[0]
        assert words.get(decision, decision) in prose, line["decision"]
    if all(line["decision"] != "RL adds after the best SFT" for line in lines):
        assert "no policy-gradient arm came out ahead of more filtered SFT" in prose
