"""Tests for course_utils.lesson_aids.plots, widgets, figures and glossary.

The plot functions are pure, so the tests read the drawn artists back (found by gid) and compare
them with independent references: piecewise formulas written with numpy, plain loops, closed
forms and the hand-worked numbers of the lessons.
"""

import math
import re

import numpy as np
import pytest
import torch
from matplotlib.patches import Rectangle

from course_utils.lesson_aids import figures, glossary, plots, widgets
from course_utils import ppo_math

torch.set_num_threads(1)


def artists(ax, gid):
    """Every line, collection or patch of ``ax`` whose gid is ``gid``."""
    found = [a for a in [*ax.lines, *ax.collections, *ax.patches] if a.get_gid() == gid]
    assert found, f"no artist with gid {gid!r}"
    return found


def line_xy(ax, gid):
    (line,) = artists(ax, gid)
    return np.asarray(line.get_xdata(), dtype=float), np.asarray(line.get_ydata(), dtype=float)


def band_extent(ax):
    (band,) = artists(ax, "clip band")
    assert isinstance(band, Rectangle)
    return band.get_x(), band.get_x() + band.get_width()


def clipped_reference(r, advantage, eps):
    """PPO's objective written piecewise: A·min(r, 1+ε) for A >= 0, A·max(r, 1-ε) for A < 0."""
    return advantage * (np.minimum(r, 1 + eps) if advantage >= 0 else np.maximum(r, 1 - eps))


# ---------------------------------------------------------------- lesson 4: clipped objective


@pytest.mark.parametrize("eps", [0.1, 0.2, 0.3])
def test_clipped_objective_panels_draw_ppo_math_values_and_the_band(eps):
    fig = plots.plot_clipped_objective(eps, advantages=(1.0, -1.0))
    axes = fig.axes
    assert len(axes) == 2
    for ax, advantage in zip(axes, (1.0, -1.0)):
        x, unclipped = line_xy(ax, "unclipped")
        x2, clipped = line_xy(ax, "clipped")
        np.testing.assert_array_equal(x, x2)
        np.testing.assert_allclose(unclipped, x * advantage)
        np.testing.assert_allclose(clipped, clipped_reference(x, advantage, eps), atol=1e-12)
        library = ppo_math.clipped_objective_per_token(torch.tensor(x), advantage, eps).numpy()
        np.testing.assert_allclose(clipped, library, atol=1e-12)
        assert band_extent(ax) == pytest.approx((1 - eps, 1 + eps))
        assert f"A = {advantage:+g}" in ax.get_title()


def test_clipped_objective_marks_the_lesson_example():
    # Lesson 4: ratios [0.5, 0.8, 1.0, 1.2, 1.5], A = 1, ε = 0.2 -> [0.5, 0.8, 1.0, 1.2, 1.2].
    fig = figures.clipped_objective_figure()
    (points,) = artists(fig.axes[0], "marked ratios")
    offsets = points.get_offsets()
    np.testing.assert_allclose(offsets[:, 0], [0.5, 0.8, 1.0, 1.2, 1.5])
    np.testing.assert_allclose(offsets[:, 1], [0.5, 0.8, 1.0, 1.2, 1.2])
    # A = -1: the objective stops improving below 0.8, so 0.5 scores like 0.8.
    (points,) = artists(fig.axes[1], "marked ratios")
    np.testing.assert_allclose(points.get_offsets()[:, 1], [-0.8, -0.8, -1.0, -1.2, -1.5])


@pytest.mark.parametrize("bad", [0.0, 1.0, -0.2])
def test_clipped_objective_rejects_a_cliprange_outside_0_1(bad):
    with pytest.raises(ValueError, match="cliprange"):
        plots.plot_clipped_objective(bad)


# ---------------------------------------------------------------- lesson 4: the widget callback


@pytest.fixture(scope="module")
def ratio_batch():
    return widgets.sampled_log_ratios(n=3000, spread=0.2, seed=1)


@pytest.mark.parametrize("advantage", [1.0, 0.5, -1.0, -2.0, 0.0])
@pytest.mark.parametrize("eps", [0.1, 0.2, 0.35])
def test_clipping_view_clip_fraction_counts_the_right_tail(ratio_batch, advantage, eps):
    logprobs, old_logprobs = ratio_batch
    fig, clip_fraction = widgets.clipping_view(eps, advantage, logprobs, old_logprobs)
    r = np.exp(logprobs.numpy() - old_logprobs.numpy()).ravel()
    if advantage > 0:
        expected = np.mean(r > 1 + eps)
    elif advantage < 0:
        expected = np.mean(r < 1 - eps)
    else:
        expected = 0.0
    assert clip_fraction == pytest.approx(expected, abs=1e-9)
    # The histogram's orange bars hold exactly the clipped tokens.
    hist_ax = fig.axes[1]
    clipped_count = sum(p.get_height() for p in hist_ax.patches if p.get_gid() == "clipped ratios")
    kept_count = sum(p.get_height() for p in hist_ax.patches if p.get_gid() == "unclipped ratios")
    assert clipped_count == round(expected * r.size)
    assert clipped_count + kept_count == r.size
    assert f"clip fraction {clip_fraction:.3f}" in hist_ax.get_title()  # the digits the lessons print
    assert band_extent(hist_ax) == pytest.approx((1 - eps, 1 + eps))


def test_clip_fraction_falls_as_the_cliprange_widens(ratio_batch):
    fractions = [widgets.clipping_view(eps, 1.0, *ratio_batch)[1] for eps in (0.05, 0.1, 0.2, 0.4)]
    assert all(a > b for a, b in zip(fractions, fractions[1:]))


def test_clipping_view_respects_the_mask():
    old = torch.log(torch.full((2, 4), 0.5, dtype=torch.float64))
    # Row 0: ratios 1.5 (clipped for A > 0) on the real tokens; row 1's last two tokens are padding.
    new = old + math.log(1.5)
    mask = torch.tensor([[1, 1, 1, 1], [1, 1, 0, 0]])
    new[1, :2] = old[1, :2]  # ratio 1 on row 1's real tokens
    new[1, 2:] = float("inf")  # garbage in the padding must not count
    _, clip_fraction = widgets.clipping_view(0.2, 1.0, new, old, mask)
    assert clip_fraction == pytest.approx(4 / 6)


def test_clip_fraction_text_format():
    assert widgets.clip_fraction_text(0.0885) == "clip fraction: 0.09"
    assert re.fullmatch(r"clip fraction: \d\.\d\d", widgets.clip_fraction_text(torch.tensor(0.5)))


def test_clipping_widget_has_a_cliprange_slider_that_redraws(ratio_batch, capsys):
    ipywidgets = pytest.importorskip("ipywidgets")
    box = widgets.clipping_widget(*ratio_batch)
    sliders = [w for w in box.children[0].children if isinstance(w, ipywidgets.FloatSlider)]
    by_name = {s.description: s for s in sliders}
    assert set(by_name) == {"cliprange", "advantage"}
    capsys.readouterr()
    by_name["cliprange"].value = 0.1  # outside a kernel the output area prints to stdout
    printed = capsys.readouterr().out
    expected = widgets.clip_fraction_text(widgets.clipping_view(0.1, 1.0, *ratio_batch)[1])
    assert expected in printed
    assert "Image" in printed  # the figure is displayed as an image


# ---------------------------------------------------------------- other lesson-4 plots


def test_ratio_trajectories_and_clip_stats_draw_their_inputs():
    r = np.array([[1.0, 1.0], [1.1, 0.9], [1.3, 0.7]])
    fig = plots.plot_ratio_trajectories(r, 0.2, labels=["up", "down"])
    ax = fig.axes[0]
    np.testing.assert_allclose(line_xy(ax, "ratio 1")[1], r[:, 1])
    (band,) = artists(ax, "clip band")
    assert band.get_y() == pytest.approx(0.8) and band.get_y() + band.get_height() == pytest.approx(1.2)
    with pytest.raises(ValueError, match="steps, n_tokens"):
        plots.plot_ratio_trajectories(r[0], 0.2)
    fig = plots.plot_clip_stats_vs_spread([0.1, 0.2], [0.01, 0.2], [0.005, 0.02], [0.005, 0.02])
    np.testing.assert_allclose(line_xy(fig.axes[0], "clip fraction")[1], [0.01, 0.2])
    np.testing.assert_allclose(line_xy(fig.axes[1], "reference kl")[1], [0.005, 0.02])


# ---------------------------------------------------------------- lesson 3: GAE widget


def gae_plain_loop(rewards, values, last, gamma, lam):
    """GAE for one response written as the lesson's backwards loop over real tokens 0..last."""
    advantages = [0.0] * len(rewards)
    carry = 0.0
    for t in range(last, -1, -1):
        next_value = values[t + 1] if t < last else 0.0
        delta = rewards[t] + gamma * next_value - values[t]
        carry = delta + gamma * lam * carry
        advantages[t] = carry
    return advantages


@pytest.mark.parametrize("gamma, lam, position, value", [(1.0, 0.95, 99, 0.0), (0.99, 0.9, 40, 1.4),
                                                         (1.0, 1.0, 10, 0.5), (0.9, 0.0, 0, 2.5)])
def test_gae_view_matches_a_plain_loop(gamma, lam, position, value):
    fig, summary = widgets.gae_view(gamma, lam, position, value=value, score=2.0, max_len=100)
    rewards = [0.0] * 100
    rewards[position] = 2.0
    values = [value if t <= position else 0.0 for t in range(100)]
    expected = gae_plain_loop(rewards, values, position, gamma, lam)
    np.testing.assert_allclose(summary["advantages"].numpy(), expected, atol=1e-12)
    assert summary["first"] == pytest.approx(expected[0])
    assert summary["last"] == pytest.approx(2.0 - value)  # A = R - V on the last token
    # The drawn advantage line equals the advantages on real tokens and stops at the padding.
    x, y = line_xy(fig.axes[1], "advantage")
    np.testing.assert_allclose(y[: position + 1], expected[: position + 1], atol=1e-12)
    assert np.isnan(y[position + 1:]).all()
    assert summary["mask"].sum() == position + 1


def test_gae_view_closed_form_with_no_value_head():
    # V = 0, γ = 1: A_t = score · λ^(last - t), the lesson's "each token gets 0.95 of the next one's".
    _, summary = widgets.gae_view(1.0, 0.95, 99, value=0.0, score=2.0)
    t = np.arange(100)
    np.testing.assert_allclose(summary["advantages"].numpy(), 2.0 * 0.95 ** (99 - t), rtol=1e-12)
    assert "A at token 0 (the first): +0.012" in widgets.gae_text(summary)
    with pytest.raises(ValueError, match="reward_position"):
        widgets.gae_view(1.0, 0.95, 100)


def test_gae_widget_starts_where_it_is_told_and_redraws(capsys):
    pytest.importorskip("ipywidgets")
    box = widgets.gae_widget(gamma=0.99, lam=0.5, reward_position=60, value=1.0)
    sliders = {s.description: s for row in box.children[:2] for s in row.children}
    start = {name: sliders[name].value for name in ("gamma γ", "lambda λ", "reward at token", "value guess V")}
    assert start == {"gamma γ": 0.99, "lambda λ": 0.5, "reward at token": 60, "value guess V": 1.0}
    default = {s.description: s.value for row in widgets.gae_widget().children[:2] for s in row.children}
    assert default["reward at token"] == 99 and default["gamma γ"] == 1.0
    capsys.readouterr()
    sliders["lambda λ"].value = 0.0  # outside a kernel the output area prints to stdout
    expected = widgets.gae_text(widgets.gae_view(0.99, 0.0, 60, value=1.0)[1])
    assert expected in capsys.readouterr().out
    with pytest.raises(ValueError, match="reward_position"):
        widgets.gae_widget(max_len=10, reward_position=10)


def test_every_lesson_plot_labels_its_axes():
    # A learner must be able to read each axis: every panel that draws data has both labels.
    adv = torch.tensor([0.1, 0.2, 0.3])
    figs = [
        plots.plot_token_advantages(adv, rewards=adv, values=adv, returns=adv),
        plots.plot_whitening(adv[None], adv[None], adv[None], torch.ones(1, 3)),
        plots.plot_kl_samples({"k1": [0.1, -0.2], "k3": [0.1, 0.2]}, exact_kl=0.1),
        plots.plot_kl_estimators([0.1, 0.2], {"k1": [0.1, 0.2]}, {"k1": [1.0, 1.0]}, {"k1": [0.1, 0.25]}, 500),
        plots.plot_shaped_rewards(-adv, torch.tensor([0.0, 0.0, 2.0])),
    ]
    for fig in figs:  # stacked panels share the x label of the bottom one
        assert fig.axes[-1].get_xlabel() and fig.axes[0].get_ylabel(), fig.axes[0].get_title()
    assert figs[0].axes[1].get_ylabel() == "advantage / return"
    assert plots.plot_token_advantages(adv).axes[1].get_ylabel() == "advantage"
    # the Monte Carlo dots of the bias panel are explained in the legend, with the sample count
    legend = [t.get_text() for t in figs[3].axes[0].get_legend().get_texts()]
    assert "dots: mean of 500 samples" in legend
    legend = [t.get_text() for t in figs[4].axes[0].get_legend().get_texts()]
    assert any("-β·k1_t" in text for text in legend)


def test_token_advantage_plot_rejects_a_batch():
    with pytest.raises(ValueError, match="one response"):
        plots.plot_token_advantages(torch.zeros(2, 5))


# ---------------------------------------------------------------- lesson 5: β over a fixed batch


def beta_batch():
    """Three responses: a 'hack' (high score, far from the reference), an 'honest' one, a 'bland' one."""
    scores = torch.tensor([3.0, 1.5, 0.3], dtype=torch.float64)
    per_token_kl = torch.tensor([2.5, 0.2, 0.0], dtype=torch.float64)  # nats per token, 10 tokens each
    ref = torch.log(torch.full((3, 10), 0.3, dtype=torch.float64))
    logprobs = ref + per_token_kl[:, None]
    mask = torch.ones(3, 10)
    mask[2, 6:] = 0
    return scores, logprobs, ref, mask


def test_beta_view_totals_and_the_winner_as_beta_grows():
    scores, logprobs, ref, mask = beta_batch()
    kl = np.array([25.0, 2.0, 0.0])
    winners = []
    for beta in (0.01, 0.1, 2.0):
        fig, summary = widgets.beta_view(beta, scores, logprobs, ref, mask, labels=["hack", "honest", "bland"])
        np.testing.assert_allclose(summary["kl"].numpy(), kl, atol=1e-12)
        np.testing.assert_allclose(summary["non_score"].numpy(), -beta * kl, atol=1e-12)
        np.testing.assert_allclose(summary["shaped"].numpy(), scores.numpy() - beta * kl, atol=1e-12)
        shaped_bars = [p.get_height() for p in fig.axes[0].patches if p.get_gid() == "shaped"]
        np.testing.assert_allclose(shaped_bars, scores.numpy() - beta * kl, atol=1e-12)
        winners.append(summary["label"])
    assert winners == ["hack", "honest", "bland"]
    assert widgets.beta_text(summary).startswith("β = 2: best shaped return +0.30 from bland")


def test_beta_view_keeps_one_y_axis_and_marks_bars_below_it():
    # The hack's non-score reward is -50 at β = 2: an autoscaled axis would flatten every other bar.
    scores, logprobs, ref, mask = beta_batch()
    limits = set()
    for beta in (0.01, 0.1, 2.0):
        fig, _ = widgets.beta_view(beta, scores, logprobs, ref, mask, labels=["hack", "honest", "bland"])
        limits.add(fig.axes[0].get_ylim())
    assert limits == {(-1.15 * 3.0, 1.15 * 3.0)}
    cut = [t.get_text() for t in fig.axes[0].texts if t.get_gid() == "off the axis"]
    assert cut == ["-50↓", "-4↓", "-47↓"]  # non-score rewards of the hack and the honest one, the hack's total


def test_shaped_return_sweep_is_coloured_by_kind():
    fig = plots.plot_shaped_return_vs_beta([0.01, 0.1], [[3.0, 2.9, 1.0], [1.0, 0.8, 0.9]],
                                           labels=["hack A", "hack B", "honest A"], kinds=["hack", "hack", "honest"])
    ax = fig.axes[0]
    (a,), (b,), (c,) = (artists(ax, label) for label in ("hack A", "hack B", "honest A"))
    assert a.get_color() == b.get_color() == plots.KIND_COLOURS["hack"] != c.get_color()
    assert a.get_linestyle() != b.get_linestyle()


# ---------------------------------------------------------------- lesson 5: other plots


def test_kl_and_reward_plots_draw_their_inputs():
    exact = np.array([0.1, 0.5, 1.0])
    means = {"k1": exact, "k2": exact * 0.8}
    stds = {"k1": [1.0, 2.0, 3.0], "k2": [0.5, 0.6, 0.7]}
    fig = plots.plot_kl_estimators(exact, means, stds, sampled_means={"k1": exact + 0.01})
    np.testing.assert_allclose(line_xy(fig.axes[0], "bias k2")[1], -0.2 * exact)
    np.testing.assert_allclose(line_xy(fig.axes[1], "std k1")[1], [1.0, 2.0, 3.0])
    fig = plots.plot_kl_samples({"k1": [-1.0, 0.5, 2.0], "k3": [0.1, 0.2, 0.3]}, exact_kl=0.4)
    assert "33% of samples < 0" in fig.axes[0].get_title()
    fig = plots.plot_kl_controller({"adaptive": [10, 8, 6]}, {"adaptive": [0.1, 0.12, 0.13]}, target=6)
    np.testing.assert_allclose(line_xy(fig.axes[1], "beta adaptive")[1], [0.1, 0.12, 0.13])
    pen = torch.tensor([-0.1, -0.2, -0.05, 0.0])
    score = torch.tensor([0.0, 0.0, 2.4, 0.0])
    fig = plots.plot_shaped_rewards(pen, score, mask=torch.tensor([1, 1, 1, 0]))
    np.testing.assert_allclose(line_xy(fig.axes[0], "shaped")[1], (pen + score).numpy(), atol=1e-7)
    fig = plots.plot_shaped_return_vs_beta([0.01, 0.1], [[3.0, 1.0], [1.0, 0.9]], labels=["a", "b"], ylim=(-1, 4))
    np.testing.assert_allclose(line_xy(fig.axes[0], "b")[1], [1.0, 0.9])
    assert fig.axes[0].get_ylim() == (-1, 4)


def test_whitening_and_value_plots_use_real_tokens_only():
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0]])
    raw = torch.tensor([[1.0, 2.0, 3.0, 99.0], [4.0, 5.0, 99.0, 99.0]])
    fig = plots.plot_whitening(raw, raw, raw, mask)
    counted = sum(p.get_height() for p in fig.axes[0].patches if p.get_gid() == "raw advantages")
    assert counted == 5
    fig = plots.plot_value_fit(raw, raw + 1, mask)
    (points,) = artists(fig.axes[0], "tokens")
    assert len(points.get_offsets()) == 5


def test_whitening_panels_share_axes_and_bins():
    raw = torch.tensor([[2.0, 1.0, 3.0, 0.0], [1.5, 0.0, 0.0, 0.0]])
    mask = torch.tensor([[1, 1, 1, 0], [1, 0, 0, 0]])
    masked = ppo_math.masked_whiten(raw, mask)
    naive = (raw - raw.mean()) / raw.std()
    fig = plots.plot_whitening(raw, masked, naive, mask)
    axes = fig.axes[:3]
    assert len({ax.get_xlim() for ax in axes}) == 1 and len({ax.get_ylim() for ax in axes}) == 1
    edges = [sorted({round(p.get_x(), 9) for p in ax.patches if p.get_gid()}) for ax in axes]
    assert edges[0] == edges[1] == edges[2]  # the same bins in every panel


def test_whitening_titles_never_show_minus_zero():
    raw = torch.tensor([[1.0, -1.003, 0.0]])  # mean -0.001: rounds to zero, titled +0.00
    fig = plots.plot_whitening(raw, raw, raw, torch.ones(1, 3))
    titles = [ax.get_title() for ax in fig.axes[:3]]
    assert all("mean +0.00," in t for t in titles), titles


def test_gae_spread_draws_mean_and_std_per_value_head():
    lams = [0.0, 0.5, 1.0]
    fig = plots.plot_gae_spread(lams, {"exact V": [0.0, 0.01, -0.01], "biased V": [0.5, 0.4, 0.0]},
                                {"exact V": [0.3, 0.5, 1.3], "biased V": [0.3, 0.5, 1.3]}, n_samples=100)
    std_ax, mean_ax = fig.axes[:2]
    (line,) = artists(mean_ax, "mean biased V")
    assert list(line.get_xdata()) == lams and list(line.get_ydata()) == [0.5, 0.4, 0.0]
    (line,) = artists(std_ax, "std exact V")
    assert list(line.get_ydata()) == [0.3, 0.5, 1.3]
    assert "100 responses" in std_ax.get_title() and mean_ax.get_xlabel() == "λ"


# ---------------------------------------------------------------- figures and glossary


def test_make_all_writes_deterministic_pngs(tmp_path):
    first = figures.make_all(tmp_path / "a")
    second = figures.make_all(str(tmp_path / "b"))
    assert [p.name for p in first] == list(figures.FIGURES) and "clipped_objective.png" in figures.FIGURES
    for a, b in zip(first, second):
        data = a.read_bytes()
        assert data.startswith(b"\x89PNG\r\n\x1a\n")
        assert data == b.read_bytes()
    assert figures.FIGURES_DIR.name == "figures" and (figures.FIGURES_DIR.parent / "course_utils").is_dir()


def test_the_two_lesson_1_diagrams_name_every_model_and_what_it_sends():
    from course_utils.lesson_aids import diagrams

    cycle = " ".join(t.get_text() for t in diagrams.ppo_cycle_figure().axes[0].texts)
    for piece in ("policy π_θ = π_old", "reference π_ref", "reward model", "value head", "score [B]",
                  "log π_ref [B, T]", "GAE", "clipped policy loss", "response mask"):
        assert piece in cycle, piece
    pipeline = " ".join(t.get_text() for t in diagrams.rlhf_pipeline_figure().axes[0].texts)
    for piece in ("1. SFT warm-up", "2. reward model", "3. PPO", "PPO's reference", "train split only"):
        assert piece in pipeline, piece


def test_glossary_has_korean_for_every_term_and_helpful_errors():
    hangul = re.compile(r"[\uac00-\ud7a3]")
    assert set(glossary.GLOSSARY) == set(glossary.MEANINGS)
    assert all(hangul.search(korean) for korean in glossary.GLOSSARY.values())
    table = glossary.show_glossary(["response mask", "advantage whitening", "per-token KL"])
    text = str(table)
    assert "응답 마스크" in text and "어드밴티지 표준화" in text and "토큰별 KL" in text
    assert "<table>" in table._repr_html_()
    with pytest.raises(KeyError, match="did you mean"):
        glossary.show_glossary(["advantage whitenning"])


def test_every_glossary_term_has_a_korean_meaning():
    """The Korean lessons show the glossary with Korean meanings (lang="ko"): no term may lack one."""
    hangul = re.compile(r"[\uac00-\ud7a3]")
    missing = sorted(set(glossary.GLOSSARY) - set(glossary.MEANINGS_KO))
    assert not missing, f"add a Korean meaning to MEANINGS_KO for {missing}"
    assert set(glossary.MEANINGS_KO) == set(glossary.GLOSSARY), "MEANINGS_KO names a term that is not in GLOSSARY"
    assert all(hangul.search(meaning) for meaning in glossary.MEANINGS_KO.values())


def test_show_glossary_in_korean_and_english_by_default():
    terms = ["policy", "clip fraction", "probability ratio"]
    english = glossary.show_glossary(terms)
    assert str(english) == str(glossary.show_glossary(terms, lang="en"))
    assert str(english).splitlines()[0] == "Glossary (English | 한국어 | meaning)"
    assert "<th>meaning</th>" in english._repr_html_() and glossary.MEANINGS["policy"] in str(english)
    korean = glossary.show_glossary(terms, lang="ko")
    lines = str(korean).splitlines()
    assert lines[0] == "용어집 (English | 한국어 | 뜻)"
    assert all(glossary.MEANINGS_KO[t] in line and t in line for t, line in zip(terms, lines[1:]))
    assert "<th>뜻</th>" in korean._repr_html_() and glossary.MEANINGS_KO["policy"] in korean._repr_html_()
    assert "| English | 한국어 | 뜻 |" in korean.markdown()
    # the two 비율 of week 4 are told apart: a probability ratio, and a share of clipped tokens
    assert glossary.GLOSSARY["clip fraction"].startswith("클리핑된 토큰 비율")
    with pytest.raises(ValueError, match="lang"):
        glossary.show_glossary(terms, lang="fr")


def test_readme_glossary_is_the_generated_table():
    readme = (figures.FIGURES_DIR.parent / "README.md").read_text(encoding="utf-8")
    assert glossary.readme_with_glossary(readme) == readme, "run: python -m course_utils glossary --readme"
    rows = [line for line in readme.splitlines() if line.startswith("| **")]
    assert len(rows) >= len(glossary.GLOSSARY)
    assert "| **response mask** | 응답 마스크 |" in readme
    # A README edited by hand inside the block is caught.
    tampered = readme.replace("| **response mask** | 응답 마스크 |", "| **response mask** | ??? |")
    assert glossary.readme_with_glossary(tampered) != tampered
    with pytest.raises(ValueError, match="glossary block"):
        glossary.readme_with_glossary("# no block here")


# ---------------------------------------------------------------- lessons 6b, 9, 10: views behind sliders


def test_score_threshold_counts_accepts_like_a_plain_loop(capsys):
    scores = [-1.0, 0.2, 0.5, 0.9, 1.4, 2.0]
    passed = [False, True, False, True, False, True]
    for threshold in (-2.0, 0.5, 1.0, 3.0):
        fig, summary = widgets.score_threshold_view(scores, passed, threshold)
        accepted = [(s, p) for s, p in zip(scores, passed) if s >= threshold]
        assert summary["accepted"] == len(accepted)
        assert summary["false_accepts"] == sum(1 for _, p in accepted if not p)
        if accepted:
            assert summary["precision"] == pytest.approx(sum(p for _, p in accepted) / len(accepted))
        else:
            assert math.isnan(summary["precision"])
        assert summary["recall"] == pytest.approx(sum(p for _, p in accepted) / sum(passed))
        (line,) = [a for a in fig.axes[0].lines if a.get_gid() == "threshold"]
        assert line.get_xdata()[0] == threshold
    assert "2 of them failing" in widgets.score_threshold_text(widgets.score_threshold_view(scores, passed, 0.0)[1])


def test_ratio_band_view_reads_the_recorded_ratios():
    recorded = {1: torch.tensor([1.0, 1.1, 0.7, 1.5]), 4: torch.tensor([0.5, 2.0, 1.0, 1.0])}
    _, one = widgets.ratio_band_view(recorded, 1, 0.2)
    assert one["outside"] == pytest.approx(0.5) and one["ratio_max"] == pytest.approx(1.5)
    _, wide = widgets.ratio_band_view(recorded, 1, 0.45)
    assert wide["outside"] == pytest.approx(0.25)  # only 1.5 is more than 0.45 away from 1
    _, four = widgets.ratio_band_view(recorded, 4, 0.2)
    r = np.array([0.5, 2.0, 1.0, 1.0])
    assert four["effective_sample_fraction"] == pytest.approx(r.sum() ** 2 / (len(r) * (r**2).sum()))
    assert "after 4 epoch(s)" in widgets.ratio_band_text(four)


def test_whitening_view_local_equals_global_on_one_process_and_differs_on_two():
    generator = torch.Generator().manual_seed(0)
    raw = torch.randn(6, 5, generator=generator, dtype=torch.float64)
    raw[:3] += 2.0  # the first half of the batch did better
    mask = torch.ones(6, 5)
    mask[1, 3:] = 0
    _, one = widgets.whitening_view(raw, mask, processes=1)
    assert one["largest_difference"] < 1e-12
    _, two = widgets.whitening_view(raw, mask, processes=2)
    assert two["largest_difference"] > 0.5
    # each block's mean raw advantage, by hand over the real tokens
    assert two["block_raw_means"][0] == pytest.approx(float(raw[:3][mask[:3].bool()].mean()))
    # local whitening by hand: each block to mean 0, unbiased std 1 over its own real tokens
    block = raw[3:][mask[3:].bool()]
    by_hand = (block - block.mean()) / block.std()
    fig, _ = widgets.whitening_view(raw, mask, processes=2)
    (points,) = [line for line in fig.axes[0].lines if line.get_gid() == "process 1"]
    np.testing.assert_allclose(points.get_ydata(), by_hand.numpy(), atol=1e-6)
    with pytest.raises(ValueError, match="processes"):
        widgets.whitening_view(raw, mask, processes=4, rows=3)


def test_the_new_sliders_redraw_their_views(capsys):
    ipywidgets = pytest.importorskip("ipywidgets")
    scores, passed = [0.1, 0.5, 0.9], [False, True, True]
    box = widgets.score_threshold_widget(scores, passed)
    capsys.readouterr()
    box.children[0].value = 0.6
    assert widgets.score_threshold_text(widgets.score_threshold_view(scores, passed, 0.6)[1]) in capsys.readouterr().out
    recorded = {1: torch.tensor([1.0, 1.3]), 2: torch.tensor([0.6, 1.6])}
    box = widgets.ratio_band_widget(recorded)
    epochs, clip = box.children[0].children
    assert isinstance(epochs, ipywidgets.SelectionSlider) and list(epochs.options) == [1, 2]
    capsys.readouterr()
    epochs.value = 2
    assert widgets.ratio_band_text(widgets.ratio_band_view(recorded, 2, 0.2)[1]) in capsys.readouterr().out
    raw, mask = torch.arange(12.0).reshape(4, 3), torch.ones(4, 3)
    box = widgets.whitening_widget(raw, mask)
    processes, rows = box.children[0].children
    capsys.readouterr()
    processes.value = 4
    assert widgets.whitening_text(widgets.whitening_view(raw, mask, 4, 4)[1]) in capsys.readouterr().out


def test_signal_view_counts_batches_without_a_pass_like_sampling():
    _, summary = widgets.signal_view(0.02, 16)
    assert summary["signal"] == pytest.approx(0.0196) and summary["expected_passes"] == pytest.approx(0.32)
    # (1 - p)^16 against simulated batches of 16 Bernoulli(0.02) draws
    draws = np.random.default_rng(0).random((200_000, 16)) < 0.02
    assert summary["no_pass"] == pytest.approx(float((~draws.any(axis=1)).mean()), abs=0.005)
    _, half = widgets.signal_view(0.5, 16)
    assert half["share_of_max"] == pytest.approx(1.0)
    text = widgets.signal_text(summary)
    # a batch without a pass can still have nonzero advantages (value head, KL penalty): none points to a pass
    assert "no pass" in text and "no advantage points towards a pass" in text and "every advantage 0" not in text
    with pytest.raises(ValueError, match="0 <= p <= 1"):
        widgets.signal_view(1.5)


def test_token_logprobs_keeps_two_identical_series_visible_and_the_legend_off_the_data():
    """Week 2's first-rollout figure: the reference line lay exactly under the policy's, so one line
    showed; the legend sat on a dip; each panel had its own y-range and no margin."""
    tokens = [["The", " number", " is", "<|im_end|>"], ["Yes", "<|im_end|>"]]
    policy = [[-1.9, -0.2, -2.25, -0.1], [-10.0, -0.5]]
    fig = plots.plot_token_logprobs({"log π_old (policy)": policy, "log π_ref (reference)": policy}, tokens,
                                    ["row 0", "row 1"], title="first rollout")
    first, second = fig.axes
    old, ref = first.lines
    # both series drawn, distinguishable although their values are equal: hollow circles, crosses inside
    assert list(old.get_ydata()) == list(ref.get_ydata()) == policy[0]
    assert old.get_marker() == "o" and old.get_markerfacecolor() == "none" and ref.get_marker() == "x"
    assert old.get_markersize() > ref.get_markersize() and old.get_linestyle() != ref.get_linestyle()
    # one y-axis for all panels, 5% of the data's span as margin at both ends
    assert first.get_ylim() == second.get_ylim()
    low, high = first.get_ylim()
    assert low == pytest.approx(-10.0 - 0.05 * 9.9) and high == pytest.approx(-0.1 + 0.05 * 9.9)
    # the legend belongs to the figure, not to a panel
    assert first.get_legend() is None and second.get_legend() is None
    assert [t.get_text() for t in fig.legends[0].get_texts()] == ["log π_old (policy)", "log π_ref (reference)"]
    assert [t.get_text() for t in first.get_xticklabels()] == ["The", "␣number", "␣is", "<|im_end|>"]
    with pytest.raises(ValueError, match="one value per token"):
        plots.plot_token_logprobs({"x": [[0.0], [0.0, 1.0]]}, tokens)
