"""Every figure the lessons draw comes out Korean: each plot function the notebooks call (directly, or
through a figure builder or a widget's view) is drawn on small made-up numbers that reach its labels,
then put through ``figure_language.localize`` with the table
``notebooks/translations/ko/figures/texts.yaml``.

For each figure: no text is left untranslated, no template matched by swallowing English words into
a slot (a slot holds a number, a symbol or a name such as ``test_unseen``), every glyph renders, and
after drawing no English text has come back.

What stays as drawn, by design: names that are code (task families, paddings, k1/k2/k3, TRL,
pass@k) and numbers. Texts a notebook cell writes itself (a title it passes, the labels of its runs)
are not the table's: the made-up inputs here use labels without Latin letters in their place.
"""

from __future__ import annotations

import math
import re

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.text import Text  # noqa: E402

from course_utils import ppo_math, reward_model, tasks  # noqa: E402
from course_utils.comparison import trl_compare  # noqa: E402
from course_utils.lesson_aids import (capstone, diagnostics, diagrams, figure_language, figures,  # noqa: E402
                                      pipeline_plots, plots, policy_lag, reward_model_plots, widgets)
from course_utils.machinery import report  # noqa: E402

LATIN = re.compile(r"[A-Za-z]")
HANGUL = re.compile("[\uac00-\ud7a3]")

# Code names and notation that Korean writing keeps as they are (the Korean lessons write them so):
# there is nothing to translate, and the table holds only entries with Hangul.
KEPT_AS_DRAWN = {
    *tasks.TASK_FAMILIES,                # y-axis names of per-family figures
    *reward_model.padded_answers("x"),   # the length probe's paddings
    *ppo_math.KL_ESTIMATORS,             # k1, k2, k3
    "TRL", "pass@1", "pass@16", "NaN", "β (kl_coef)", "p (1 - p)",
    "log π_old [B, T]", "log π_ref [B, T]", "r [B, T]", "A, R [B, T]",  # lesson 1's arrows: tensors
}


def _no_words(text: str) -> bool:
    """A number as matplotlib writes it ("$\\mathdefault{10^{-2}}$", "1e−5"): no word in it."""
    stripped = re.sub(r"\\mathdefault|\\times|\$", "", text)
    stripped = re.sub(r"(?<=\d)e(?=[-−+]?\d)", "", stripped)
    return not LATIN.search(stripped)


def _kept(text: str) -> bool:
    return all(line in KEPT_AS_DRAWN or _no_words(line) for line in text.split("\n"))


def _texts(fig: Figure) -> list[str]:
    return [t.get_text() for t in fig.findobj(Text)]


def _swallowed(texts) -> list[tuple[str, str]]:
    """(text, slot) where a template's slot took words: a more general template matched before the
    one written for the text (templates are tried in the table's order)."""
    exact, templates = figure_language._table("ko")
    bad = []
    for text in texts:
        if text in exact:
            continue
        for pattern, _ in templates:
            match = pattern.match(text)
            if match:
                bad += [(text, slot) for slot in match.groups() if re.search(r"\s", slot) and LATIN.search(slot)
                        and not _kept(slot)]
                break
    return bad


def _english_after_drawing(fig: Figure) -> list[str]:
    return sorted({t for t in _texts(fig) if LATIN.search(t) and not HANGUL.search(t) and not _kept(t)})


# ---------------------------------------------------------------------------------------------
# Made-up inputs, one builder per plot function (a list where one call cannot reach every label)
# ---------------------------------------------------------------------------------------------

_generator = torch.Generator().manual_seed(0)


def _randn(*shape) -> torch.Tensor:
    return torch.randn(*shape, generator=_generator, dtype=torch.float64)


def _mask(lengths, width) -> torch.Tensor:
    return torch.arange(width)[None, :] < torch.tensor(lengths)[:, None]


# --- plots (lessons 2-5) ---

def _token_logprobs():
    return plots.plot_token_logprobs({"α": [[-1.0, -0.5, -2.0], [-0.3, -0.2]], "β": [[-1.1, -0.4, -2.0], [-0.3, -0.1]]},
                                     tokens=[["1", " +", "2"], ["=", " 3"]])


def _clipped_objective():
    return plots.plot_clipped_objective(0.2, advantages=(1.0, -1.0, 0.0), mark_ratios=(0.5, 1.0, 1.5))


def _clipping_view():
    ratios = [0.7, 0.9, 1.0, 1.1, 1.3, 1.6, math.nan, math.inf]
    return [plots.plot_clipping_view(ratios, 0.2, 1.0, clip_fraction=0.25),
            plots.plot_clipping_view(ratios[:6], 0.2, -1.0, clip_fraction=math.nan),
            plots.plot_clipping_view(ratios[:6], 0.2, 1.0),
            plots.plot_clipping_view(ratios, 0.2, 1.0, clip_fraction=math.nan),
            plots.plot_clipping_view(ratios, 0.2, 1.0)]


def _ratio_trajectories():
    return plots.plot_ratio_trajectories(1 + 0.1 * _randn(5, 3).cumsum(0), 0.2)


def _clip_stats_vs_spread():
    return plots.plot_clip_stats_vs_spread([0.05, 0.1, 0.2], [0.0, 0.1, 0.3], [0.001, 0.005, 0.02], [0.001, 0.005, 0.02])


def _token_advantages():
    mask = _mask([5], 7)[0]
    rewards, values = torch.zeros(7, dtype=torch.float64), torch.full((7,), 0.5, dtype=torch.float64)
    rewards[4] = 2.0
    adv = _randn(7)
    return [plots.plot_token_advantages(adv, mask, rewards, values, adv + values),
            plots.plot_token_advantages(adv, mask)]


def _advantage_curves():
    return plots.plot_advantage_curves({"λ = 0": _randn(6), "λ = 1": _randn(6)}, mask=_mask([4], 6)[0])


def _whitening():
    mask = _mask([4, 2], 5)
    raw = _randn(2, 5)
    return plots.plot_whitening(raw, ppo_math.masked_whiten(raw, mask), (raw - raw.mean()) / raw.std(), mask)


def _gae_spread():
    lams = [0.0, 0.5, 1.0]
    return [plots.plot_gae_spread(lams, {"α": [0.0, 0.1, 0.2], "β": [0.5, 0.3, 0.0]},
                                  {"α": [0.3, 0.4, 0.5], "β": [0.3, 0.4, 0.5]}, n_samples=200),
            plots.plot_gae_spread(lams, {"α": [0.0, 0.1, 0.2], "β": [0.5, 0.3, 0.0]},
                                  {"α": [0.3, 0.4, 0.5], "β": [0.2, 0.4, 0.6]}, n_samples=200)]


def _value_fit():
    return plots.plot_value_fit(_randn(2, 4), _randn(2, 4), _mask([4, 3], 4))


def _shaped_rewards():
    penalties = -0.05 * _randn(6).abs()
    score = torch.zeros(6, dtype=torch.float64)
    score[3] = 1.5
    return plots.plot_shaped_rewards(penalties, score, _mask([4], 6)[0])


def _reward_components():
    return plots.plot_reward_components([1.0, math.nan, 2.0, 0.5], [-0.5, -9.0, -math.inf, math.inf],
                                        [0.5, math.nan, -math.inf, math.inf], ylim=(-3.0, 3.0))


def _shaped_return_vs_beta():
    betas = np.geomspace(0.001, 1.0, 5)
    return plots.plot_shaped_return_vs_beta(betas, _randn(5, 3), beta_now=0.05, ylim=(-2, 2),
                                            kinds=["hack", "honest", "honest"])


def _kl_estimators():
    exact = [0.01, 0.1, 0.5]
    means = {k: [x * 1.1 for x in exact] for k in ppo_math.KL_ESTIMATORS}
    stds = {k: [0.1, 0.3, 0.8] for k in ppo_math.KL_ESTIMATORS}
    return [plots.plot_kl_estimators(exact, means, stds, means, n_samples=2000),
            plots.plot_kl_estimators(exact, means, stds, means)]


def _kl_samples():
    return plots.plot_kl_samples({"k1": _randn(50), "k3": _randn(50).abs()}, 0.1)


def _kl_controller():
    return plots.plot_kl_controller({"가": [1.0, 2.0, 3.0]}, {"가": [0.1, 0.2, 0.3]}, target=6.0)


# --- figures and diagrams (lessons 1, 3, 4) ---

def _figure_builders():
    return [figures.clipped_objective_figure(), figures.clipping_view_figure(), figures.gae_walkthrough_figure()]


def _ppo_cycle():
    return diagrams.ppo_cycle_figure()


def _rlhf_pipeline():
    return diagrams.rlhf_pipeline_figure()


# --- widgets' views (lessons 3-6b, 8-10) ---

def _clipping_view_widget():
    return widgets.clipping_view(0.2, 1.0, *widgets.sampled_log_ratios(n=200))[0]


def _gae_view():
    return widgets.gae_view(1.0, 0.95, 5, value=0.5, score=2.0, max_len=8)[0]


def _beta_view():
    lp, ref = -_randn(3, 4).abs(), -_randn(3, 4).abs()
    mask = _mask([4, 3, 2], 4)
    one_nan = torch.tensor([1.0, math.nan, 2.0], dtype=torch.float64)
    two_nan = torch.tensor([1.0, math.nan, math.nan], dtype=torch.float64)
    all_nan = torch.full((3,), math.nan, dtype=torch.float64)
    views = [widgets.beta_view(beta, scores, lp, ref, mask)[0]
             for beta, scores in ((0.05, torch.tensor([1.0, 2.0, 0.5], dtype=torch.float64)),
                                  (0.05, one_nan), (0.1, two_nan), (0.1, all_nan))]
    # with the lesson's own names for the responses (week 5 passes "hack A", ...: here without letters)
    return views + [widgets.beta_view(0.05, scores, lp, ref, mask, labels=["가", "나", "다"])[0]
                    for scores in (torch.tensor([1.0, 2.0, 0.5], dtype=torch.float64), one_nan, two_nan)]


def _signal_view():
    return widgets.signal_view(0.3, 16)[0]


def _score_threshold_view():
    return widgets.score_threshold_view([-1.0, -0.5, 0.2, 0.8, 1.5], [False, False, True, False, True], 0.0)[0]


def _ratio_band_view():
    return widgets.ratio_band_view({1: torch.tensor([0.5, 0.9, 1.0, 1.1, 1.4])}, 1, 0.2)[0]


def _whitening_view():
    return widgets.whitening_view(_randn(4, 5), _mask([5, 4, 3, 5], 5), processes=2)[0]


HISTORY = [{"update": u, "score": 0.1 * u, "kl_per_sequence": 0.5 * u, "response_length": 10 - u,
            "entropy": 2.0, "policy_clipfrac": 0.1, "approx_kl": 0.01 * u, "value_loss": 0.5 / u,
            "explained_variance": 0.1 * u, "ratio_mean": 1.0, "ratio_max": 1.2 + 2 * u, "kl_coef": 0.05,
            "grad_norm": 0.5, "time_update_s": 3.0}
           for u in range(1, 7)]
EVALS = [{"update": 0, "pass_rate": 0.40, "mean_reward": 0.1, "answers": ["1"] * 10},
         {"update": 2, "pass_rate": 0.50, "mean_reward": 0.2, "answers": ["1"] * 10},
         {"update": 4, "pass_rate": 0.45, "mean_reward": 0.3, "answers": ["1"] * 10},
         {"update": 6, "pass_rate": 0.44, "mean_reward": 0.4, "answers": ["1"] * 10}]


def _hacking_rule_view():
    return widgets.hacking_rule_view(HISTORY, EVALS, 2, 2)[0]


# --- pipeline_plots (lessons 6a, 7, 8, 11) ---

def _pass_at_k():
    return pipeline_plots.plot_pass_at_k({"result_sum": {"pass_at_1": 0.0, "pass_at_k": 0.0},
                                          "count_words": {"pass_at_1": 0.2, "pass_at_k": 0.7}}, 16)


def _arms():
    return pipeline_plots.plot_arms({"가": {"test": [40, 45, 50]}, "나": {"test": [60, 62]}},
                                    ceiling={"test": [70, 72]}, set_labels={"test": "테스트"})


def _overoptimisation():
    run = {"sqrt_kl": [0.0, 1.0, 2.0, 3.0], "proxy": [0.1, 0.5, 0.9, 1.2], "gold": [40, 50, 45, 30]}
    curves = {"가 1": run, "가 2": {k: [v * 1.1 for v in vs] for k, vs in run.items()}, "나 1": run}
    return pipeline_plots.plot_overoptimisation(curves, start_gold=40.0,
                                                groups={"가 1": "β=0.05", "가 2": "β=0.05", "나 1": "β=0.2"})


# --- reward_model_plots (lesson 6b) ---

def _bradley_terry_loss():
    return reward_model_plots.plot_bradley_terry_loss(np.linspace(-3, 3, 13))


def _training_history():
    return reward_model_plots.plot_training_history({"loss": [0.69, 0.6, 0.5, 0.4], "accuracy": [0.5, 0.6, 0.7, 0.8]},
                                                    window=2)


def _pairwise_by_kind():
    per_kind = {"wrong_arithmetic": {"accuracy": 0.6, "mean_margin": 0.4, "n": 12},
                "code_fence": {"accuracy": 0.9, "mean_margin": 1.2, "n": 8}}
    return reward_model_plots.plot_pairwise_by_kind(per_kind, reference=per_kind)


SCORES = [-1.0, -0.5, 0.2, 0.8, 1.5, 0.1]
PASSED = [False, False, True, False, True, False]


def _scores_by_verdict():
    return reward_model_plots.plot_scores_by_verdict(SCORES, PASSED,
                                                     ["nothing", "buried", "pass", "plain_wrong", "pass", "partial"])


def _score_threshold():
    return reward_model_plots.plot_score_threshold(SCORES, PASSED, 0.3)


def _length_probe():
    probe = {"n": 10, **{name: {"mean_delta": d, "fraction_higher": 0.3, "checker_passes": 0}
                         for name, d in zip(reward_model.padded_answers("x"), (-0.5, -1.0, 0.2, 0.0))}}
    return reward_model_plots.plot_length_probe(probe)


# --- diagnostics (lessons 7, 8) ---

def _log_bundle():
    return [diagnostics.plot_log_bundle(HISTORY),
            diagnostics.plot_log_bundle(HISTORY, metrics=["grad_norm", "time_update_s", "kl_coef"], columns=3)]


def _reward_vs_heldout():
    same = [{**e, "mean_reward": e["pass_rate"]} for e in EVALS]
    return [diagnostics.plot_reward_vs_heldout(HISTORY, EVALS, stop_update=4),
            diagnostics.plot_reward_vs_heldout(HISTORY, same)]


def _score_vs_pass():
    before = {"count_words": {"score": 0.2, "pass_rate": 0.1, "n": 10},
              "result_sum": {"score": 0.5, "pass_rate": 0.5, "n": 10},
              "bracket_word": {"score": 0.5, "pass_rate": 0.5, "n": 10}}
    after = {"count_words": {"score": 0.8, "pass_rate": 0.6, "n": 10}, **{f: before[f] for f in list(before)[1:]}}
    return [diagnostics.plot_score_vs_pass(before, after), diagnostics.plot_score_vs_pass(before)]


def _runs():
    return diagnostics.plot_runs({"가": (HISTORY, EVALS), "나": (HISTORY[:4], EVALS[:3])})


def _trust_region():
    return diagnostics.plot_trust_region({"가": HISTORY, "나": HISTORY[:3]}, target_kl=0.02)


# --- policy_lag (lesson 9) ---

def _ratio_histograms():
    return policy_lag.plot_ratio_histograms({1: torch.tensor([0.6, 0.95, 1.0, 1.05, 1.4]),
                                             4: torch.tensor([0.3, 0.9, 1.0, 1.5, 3.0])}, 0.2)


def _lag_vs_epoch():
    rows = [{"epoch": e, "clipfrac": 0.1 * e, "approx_kl": 0.001 * e, "ratio_std": 0.05 * e,
             "effective_sample_fraction": 1 - 0.05 * e} for e in range(4)]
    return [policy_lag.plot_lag_vs_epoch({"가": rows, "나": rows[:3]}, cliprange=0.2),
            policy_lag.plot_lag_vs_epoch({"가": rows})]


# --- capstone (lesson 11) ---

def _pass_at_k_shift():
    pass_at_k = {"sft": {"result_sum": {"pass_at_1": 0.0, "pass_at_16": 0.0},
                         "count_words": {"pass_at_1": 20.0, "pass_at_16": 70.0}},
                 "sft_ppo_checker": {"result_sum": {"pass_at_1": 0.0}, "count_words": {"pass_at_1": 55.0}}}
    return capstone.plot_pass_at_k_shift(capstone.pass_at_k_shift(pass_at_k))


def _design_arms():
    sets = ("test_nodemo", "test_unseen_nodemo", "test_demo")
    design = {"arms": {"sft_full_nodemo": {s: [20, 25] for s in sets}, "sft_ppo_checker_nodemo": {s: [40, 42] for s in sets}}}
    return capstone.plot_design_arms(design, {"sft_full_nodemo": "대조군", "sft_ppo_checker_nodemo": "강화학습"})


def _noise_crossover():
    levels = {kind: {0.0: [60, 62], 0.5: [40, 44]} for kind in capstone.NOISY_ARM_LABELS}
    return capstone.plot_noise_crossover(levels)


def _retention():
    curve = [{"gain_trained": 0, "change_others": 0}, {"gain_trained": 10, "change_others": -4}]
    design = {"arms": {"sft_ppo_checker_retention": {"gain_trained": [20, 22], "change_others": [-1, 0], "curves": [curve]},
                       "sft_continue_retention": {"gain_trained": [25, 27], "change_others": [-8, -10], "curves": [curve]}}}
    return capstone.plot_retention(design)


def _learning_curves():
    def seeds(n):
        return {s: [(10.0, 40.0), (12.0, 45.0 + s), (15.0, 50.0 + s)] for s in range(n)}

    return [capstone.plot_learning_curves({"첫 패널": {arm: seeds(3) for arm in capstone.DESIGN1_ARM_LABELS},
                                           "둘째 패널": {arm: seeds(3) for arm in capstone.DESIGN1_ARM_LABELS}}),
            capstone.plot_learning_curves({"첫 패널": {arm: seeds(1) for arm in capstone.DESIGN1_ARM_LABELS}})]


def _coverage():
    points = [{"coverage": 0, "sft": [10, 12], "ppo": [20, 24], "sft_name": capstone.NO_SFT_NAME,
               "ppo_name": capstone.OTHER_PPO_NAME},
              {"coverage": 80, "sft": [50, 52], "ppo": [48, 50], "sft_filtered": [55, 56]},
              {"coverage": 100, "sft": [60, 62], "ppo": [58, 61]}]
    return [capstone.plot_coverage(points), capstone.plot_coverage(points, highlight=80)]  # the widget's figure


# --- machinery.report (lessons 6a, 7) and comparison.trl_compare (lesson 10) ---

def _sft():
    before = {"per_family": {"result_sum": 0.1, "count_words": 0.3}}
    after = {"per_family": {"result_sum": 0.6, "count_words": 0.5}}
    return report.plot_sft([2.0, 1.5, 1.2, 1.0, 0.9, 0.8], before, after)


def _training_curves():
    return report.plot_training_curves(HISTORY, EVALS)


def _side_by_side():
    ours = [{p.ours: 1.0 + 0.01 * i for p in trl_compare.METRIC_PAIRS if p.ours} for i in range(2)]
    trl = [{p.trl: 1.0 + 0.02 * i for p in trl_compare.METRIC_PAIRS} for i in range(2)]
    names = ["objective/scores", "objective/kl", "loss/policy_avg", "loss/value_avg", "policy/approxkl_avg",
             "policy/clipfrac_avg", "val/ratio", "policy/entropy_avg",  # lesson 10's eight
             "objective/entropy", "val/ratio_var"]                       # none of ours; different quantities
    return trl_compare.plot_side_by_side(trl_compare.side_by_side(ours, trl), names=names)


FIGURES = {
    # plots
    "plots.plot_token_logprobs": _token_logprobs,
    "plots.plot_clipped_objective": _clipped_objective,
    "plots.plot_clipping_view": _clipping_view,
    "plots.plot_ratio_trajectories": _ratio_trajectories,
    "plots.plot_clip_stats_vs_spread": _clip_stats_vs_spread,
    "plots.plot_token_advantages": _token_advantages,
    "plots.plot_advantage_curves": _advantage_curves,
    "plots.plot_whitening": _whitening,
    "plots.plot_gae_spread": _gae_spread,
    "plots.plot_value_fit": _value_fit,
    "plots.plot_shaped_rewards": _shaped_rewards,
    "plots.plot_reward_components": _reward_components,
    "plots.plot_shaped_return_vs_beta": _shaped_return_vs_beta,
    "plots.plot_kl_estimators": _kl_estimators,
    "plots.plot_kl_samples": _kl_samples,
    "plots.plot_kl_controller": _kl_controller,
    # figures, diagrams
    "figures.FIGURES": _figure_builders,  # clipped_objective, clipping_view, gae_walkthrough
    "diagrams.ppo_cycle_figure": _ppo_cycle,
    "diagrams.rlhf_pipeline_figure": _rlhf_pipeline,
    # widgets (the views the sliders draw)
    "widgets.clipping_view": _clipping_view_widget,
    "widgets.gae_view": _gae_view,
    "widgets.beta_view": _beta_view,
    "widgets.signal_view": _signal_view,
    "widgets.score_threshold_view": _score_threshold_view,
    "widgets.ratio_band_view": _ratio_band_view,
    "widgets.whitening_view": _whitening_view,
    "widgets.hacking_rule_view": _hacking_rule_view,
    # pipeline_plots
    "pipeline_plots.plot_pass_at_k": _pass_at_k,
    "pipeline_plots.plot_arms": _arms,
    "pipeline_plots.plot_overoptimisation": _overoptimisation,
    # reward_model_plots
    "reward_model_plots.plot_bradley_terry_loss": _bradley_terry_loss,
    "reward_model_plots.plot_training_history": _training_history,
    "reward_model_plots.plot_pairwise_by_kind": _pairwise_by_kind,
    "reward_model_plots.plot_scores_by_verdict": _scores_by_verdict,
    "reward_model_plots.plot_score_threshold": _score_threshold,
    "reward_model_plots.plot_length_probe": _length_probe,
    # diagnostics
    "diagnostics.plot_log_bundle": _log_bundle,
    "diagnostics.plot_reward_vs_heldout": _reward_vs_heldout,
    "diagnostics.plot_score_vs_pass": _score_vs_pass,
    "diagnostics.plot_runs": _runs,
    "diagnostics.plot_trust_region": _trust_region,
    # policy_lag
    "policy_lag.plot_ratio_histograms": _ratio_histograms,
    "policy_lag.plot_lag_vs_epoch": _lag_vs_epoch,
    # capstone
    "capstone.plot_pass_at_k_shift": _pass_at_k_shift,
    "capstone.plot_design_arms": _design_arms,
    "capstone.plot_noise_crossover": _noise_crossover,
    "capstone.plot_retention": _retention,
    "capstone.plot_learning_curves": _learning_curves,
    "capstone.plot_coverage": _coverage,
    # machinery.report, comparison.trl_compare
    "report.plot_sft": _sft,
    "report.plot_training_curves": _training_curves,
    "trl_compare.plot_side_by_side": _side_by_side,
}

@pytest.fixture
def korean():
    figure_language.use_language("ko")
    yield
    figure_language.use_language("en")


@pytest.mark.parametrize("name", list(FIGURES))
def test_the_figure_comes_out_korean(name, korean):
    built = FIGURES[name]()
    reverted = []  # English back after drawing (e.g. tick labels set again from a formatter's list)
    for fig in built if isinstance(built, list) else [built]:
        drawn = {t for t in _texts(fig) if LATIN.search(t)}
        untranslated = [t for t in figure_language.localize(fig) if not _kept(t)]
        assert untranslated == [], f"{name}: no entry in texts.yaml for {untranslated}"
        assert _swallowed(drawn) == [], f"{name}: a template took words into a slot"
        assert figure_language.missing_glyphs(fig) == []
        reverted += _english_after_drawing(fig)
        plt.close(fig)
    assert reverted == [], f"{name}: English again after drawing"


def test_the_korean_keeps_every_number_and_slot():
    """Each entry's Korean keeps the digits and the symbols of its English (numbers, ε, β, %, ...):
    only punctuation may change, and a count's "n=" may become a counter word ("(n={})" -> "({}개)")."""
    import yaml

    entries = yaml.safe_load(figure_language.texts_file("ko").read_text(encoding="utf-8"))
    for e in entries:
        english, korean = e["en"], e["ko"]
        symbols = re.sub(r"[A-Za-z\s'(),.:;\-]", "", re.sub(r"\bn=|\{\}", "", english))
        assert [ch for ch in set(symbols) if ch not in korean] == [], (english, korean)
