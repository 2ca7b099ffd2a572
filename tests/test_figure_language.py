"""Figures in the lesson's language: the translations table, ``localize`` on a real plot, and the
Hangul font (no glyph missing), with checks that fail when the font or an entry is missing."""

from __future__ import annotations

import re

import matplotlib
import pytest
import yaml
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.ticker import FixedFormatter, FixedLocator

from course_utils.lesson_aids import capstone, figure_language, plots


@pytest.fixture
def korean():
    figure_language.use_language("ko")
    yield
    figure_language.use_language("en")


def test_exact_texts_and_templates_translate_and_unknown_ones_do_not():
    assert figure_language.translate_text("share of demonstrations that are a labeler's mistake", "ko") == \
        "레이블러의 실수인 시연의 비율"
    assert figure_language.translate_text("strict pass rate on test_unseen, %", "ko") == "test_unseen 엄격 통과율, %"
    assert figure_language.translate_text("a text nobody translated", "ko") is None
    assert figure_language.translate_text("anything", "en") == "anything"


def test_a_lesson_figure_comes_out_korean_with_every_glyph(korean):
    levels = {"sft_full": {0.25: [60, 62], 0.75: [16, 26]}, "sft_ppo_checker": {0.75: [45, 49]}}
    fig = capstone.plot_noise_crossover(levels)
    assert figure_language.localize(fig) == []
    ax = fig.axes[0]
    assert ax.get_title().startswith("설계 (f)") and ax.get_legend().get_title().get_text().startswith("점선")
    assert figure_language.missing_glyphs(fig) == []
    assert figure_language.localize(fig) == []  # once: a second call changes nothing
    assert plots.figure_to_png(fig).startswith(b"\x89PNG")


def test_an_untranslated_text_is_reported_and_left_as_drawn(korean):
    fig = Figure()
    fig.subplots().set_title("a title with no entry")
    assert figure_language.localize(fig) == ["a title with no entry"]
    assert fig.axes[0].get_title() == "a title with no entry"


def test_tick_labels_given_as_a_list_stay_korean_when_drawn(korean):
    """Labels given with the ticks are kept in the axis's formatter (``set_xticks(ticks, labels)``: a
    FuncFormatter over {tick: label}; a FixedFormatter's list), major and minor, and every draw sets
    the ticks' texts from there again: localize translates them there too, or the English comes back."""
    fig = Figure()
    ax = fig.subplots()
    ax.set_xticks([0, 1], ["pass (n=3)", "fail (n=2)"])
    ax.set_xticks([0.5], ["pass (n=1)"], minor=True)
    ax.yaxis.set_major_locator(FixedLocator([0, 1]))
    ax.yaxis.set_major_formatter(FixedFormatter(["fail (n=4)", "pass (n=5)"]))
    assert figure_language.localize(fig) == []
    assert figure_language.missing_glyphs(fig) == []  # draws it
    assert [t.get_text() for t in ax.get_xticklabels()] == ["통과 (3개)", "실패 (2개)"]
    assert [t.get_text() for t in ax.get_xticklabels(minor=True)] == ["통과 (1개)"]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["실패 (4개)", "통과 (5개)"]


def test_math_tick_labels_are_kept_as_drawn_but_words_beside_math_are_not(korean):
    """A log axis writes its ticks as mathtext ("$\\mathdefault{10^{-2}}$"): a number, nothing to
    translate. Letters outside the ``$...$`` are words."""
    fig = Figure()
    ax = fig.subplots()
    ax.plot([1, 2], [1e-3, 10])
    ax.set_yscale("log")
    ax.text(1, 1, r"$\beta$ with words")
    FigureCanvasAgg(fig).draw()  # the ticks get their labels when drawn
    assert r"$\mathdefault{10^{-2}}$" in [t.get_text() for t in ax.get_yticklabels()]
    assert figure_language.localize(fig) == [r"$\beta$ with words"]


def test_hangul_without_the_font_is_caught():
    """The glyph check can fail: DejaVu Sans alone has no Hangul."""
    figure_language.use_language("en")
    with matplotlib.rc_context({"font.family": ["DejaVu Sans"]}):
        fig = Figure()
        fig.subplots().set_title("한국어 제목")
        assert figure_language.missing_glyphs(fig)


def test_english_figures_are_left_alone():
    figure_language.use_language("en")
    fig = Figure()
    fig.subplots().set_title("English")
    assert figure_language.localize(fig) == [] and fig.axes[0].get_title() == "English"


def test_bad_language_and_missing_font_name_the_fix(monkeypatch):
    with pytest.raises(ValueError, match="one of en, ko"):
        figure_language.use_language("fr")
    monkeypatch.setattr(figure_language, "hangul_font_file", lambda: None)
    with pytest.raises(RuntimeError, match=re.escape(figure_language.HANGUL_FONT_PACKAGE)):
        figure_language.use_language("ko")
    assert figure_language.current_language() == "en"


def test_the_table_is_well_formed():
    entries = yaml.safe_load(figure_language.texts_file("ko").read_text(encoding="utf-8"))
    english = [e["en"] for e in entries]
    assert len(english) == len(set(english)), "an English text is listed twice"
    for e in entries:
        slots = e["en"].count("{}")
        korean = e["ko"]
        assert slots == korean.count("{}") or slots == len(set(re.findall(r"\{\d\}", korean))), e
        assert re.search("[\uac00-\ud7a3]", korean), e  # a Korean translation has Hangul
