"""Figures in the lesson's language.

The plot functions draw in English, once, and stay pure. A lesson in another language calls
``use_language("ko")`` in its set-up cell; from then on every figure it shows (a cell's figure, a
widget's ``plots.figure_to_png``) first goes through ``localize``: each text of the drawn figure
(title, axis labels, legend entries, annotations, tick labels) is looked up in the table
``notebooks/translations/<language>/figures/texts.yaml`` and replaced. An entry is an exact English
text, or a template whose ``{}`` slots stand for the parts that change (numbers, names), carried over
as drawn. Texts without a translation stay English and are returned, so a test or a report can list
them.

The Hangul comes from NanumGothic, the font the pinned ``koreanize-matplotlib`` wheel ships (installed
with the other requirements; the package itself is never imported, since importing it restyles every
figure). Latin letters stay in matplotlib's DejaVu Sans and only the glyphs DejaVu lacks fall back to
NanumGothic, so an English figure keeps its look and a Korean one renders the same on every machine.
"""

from __future__ import annotations

import functools
import importlib.util
import re
import warnings
from functools import lru_cache
from pathlib import Path

import matplotlib
import yaml
from matplotlib import cbook, font_manager
from matplotlib.axis import Axis
from matplotlib.figure import Figure
from matplotlib.text import Text
from matplotlib.ticker import FixedFormatter, FuncFormatter

from course_utils.machinery.paths import NOTEBOOKS_DIR

LANGUAGES = ("en", "ko")
HANGUL_FONT = "NanumGothic"
HANGUL_FONT_PACKAGE = "koreanize-matplotlib==0.1.1"
_language = "en"


def hangul_font_file() -> Path | None:
    """NanumGothic.ttf inside the installed ``koreanize_matplotlib`` package, found without importing
    it; None when the package is not installed."""
    spec = importlib.util.find_spec("koreanize_matplotlib")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / "fonts" / f"{HANGUL_FONT}.ttf"
    return path if path.is_file() else None


def use_language(language: str) -> None:
    """Show this session's figures in ``language`` ("en" or "ko"). For "ko": NanumGothic joins the
    font list behind DejaVu Sans, and figures shown by IPython are localized before they render."""
    global _language
    if language not in LANGUAGES:
        raise ValueError(f"language must be one of {', '.join(LANGUAGES)}; got {language!r}")
    if language == "en":
        matplotlib.rcParams["font.family"] = ["sans-serif"]
    else:
        path = hangul_font_file()
        if path is None:
            raise RuntimeError(f"no Hangul font for the figures: pip install {HANGUL_FONT_PACKAGE} "
                               "(requirements.txt pins it; `make setup` installs it)")
        font_manager.fontManager.addfont(str(path))
        matplotlib.rcParams["font.family"] = ["DejaVu Sans", HANGUL_FONT]
    _language = language
    _show_figures_localized()


def current_language() -> str:
    return _language


def _show_figures_localized() -> None:
    """Inside IPython, render a displayed Figure through ``localize`` (as the inline backend would,
    with a tight bounding box). Outside IPython nothing to do."""
    try:
        from IPython import get_ipython
    except ImportError:
        return
    shell = get_ipython()
    if shell is None:
        return
    from IPython.core.pylabtools import print_figure

    def png(fig: Figure) -> bytes:
        localize(fig)
        return print_figure(fig, "png", bbox_inches="tight")

    shell.display_formatter.formatters["image/png"].for_type(Figure, png)


def texts_file(language: str) -> Path:
    return NOTEBOOKS_DIR / "translations" / language / "figures" / "texts.yaml"


@lru_cache(maxsize=None)
def _table(language: str) -> tuple[dict[str, str], tuple[tuple[re.Pattern, str], ...]]:
    """(exact English text -> translation, [(template as a regex, translation template)])."""
    path = texts_file(language)
    entries = yaml.safe_load(path.read_text(encoding="utf-8")) if path.is_file() else []
    exact, templates = {}, []
    for entry in entries or []:
        english, translated = entry["en"], entry[language]
        if "{}" in english:
            pattern = "^" + "(.+?)".join(re.escape(part) for part in english.split("{}")) + "$"
            templates.append((re.compile(pattern, re.S), translated))
        else:
            exact[english] = translated
    return exact, tuple(templates)


def translate_text(text: str, language: str) -> str | None:
    """``text`` in ``language``, or None when the table has no entry for it. A template's slots are
    filled in order (``{}``), or by position (``{0}``, ``{1}``) where the language orders them
    differently."""
    if language == "en":
        return text
    exact, templates = _table(language)
    if text in exact:
        return exact[text]
    for pattern, translated in templates:
        match = pattern.match(text)
        if match:
            return translated.format(*match.groups())
    return None


def _has_words(text: str) -> bool:
    """Whether ``text`` has letters to translate. Mathtext (between unescaped ``$``, e.g. a log axis's
    ``$\\mathdefault{10^{-2}}$``) is notation, kept as drawn: only letters outside it count."""
    if cbook.is_math_text(text):
        text = re.sub(r"(?<!\\)\$.*?(?<!\\)\$", "", text, flags=re.S)
    return bool(re.search(r"[A-Za-z]", text))


def _translate_stored_tick_labels(fig: Figure, language: str) -> None:
    """Tick labels given as a list (``ax.set_xticks(ticks, labels)``, ``set_yticklabels``) live in the
    axis's formatter, which sets every tick's Text again when the figure is drawn: translating the
    Text alone would be drawn over with the English. matplotlib's ``Axis.set_ticklabels`` (axis.py)
    stores the list as ``FuncFormatter(functools.partial(Axis._format_with_dict, {loc: label}))`` when
    the ticks are fixed, else as ``FixedFormatter(labels)`` (``.seq``); both are translated here. Any
    other ``FuncFormatter`` wraps a function whose strings cannot be reached, and a format string
    (``StrMethodFormatter``) is not a drawn text: their words would stay English (no plot here uses one
    with words)."""
    def translated(label):
        return (translate_text(label, language) or label) if isinstance(label, str) else label

    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            for formatter in (axis.get_major_formatter(), axis.get_minor_formatter()):
                if isinstance(formatter, FixedFormatter):
                    formatter.seq = [translated(label) for label in formatter.seq]
                elif (isinstance(formatter, FuncFormatter) and isinstance(formatter.func, functools.partial)
                      and formatter.func.func is getattr(Axis, "_format_with_dict", None)):
                    labels = formatter.func.args[0]
                    labels.update({loc: translated(label) for loc, label in labels.items()})


def localize(fig: Figure, language: str | None = None) -> list[str]:
    """Put every text of ``fig`` into ``language`` (default: the session's, ``use_language``), once.
    Returns the texts with letters that have no translation (they stay as drawn); numbers alone
    (tick labels, a log axis's mathtext powers) need none."""
    language = language or _language
    if language == "en" or getattr(fig, "_course_language", None) == language:
        return []
    missing = []
    for artist in fig.findobj(Text):
        text = artist.get_text()
        if not _has_words(text):
            continue
        translated = translate_text(text, language)
        if translated is None:
            missing.append(text)
        else:
            artist.set_text(translated)
    _translate_stored_tick_labels(fig, language)
    fig._course_language = language
    return sorted(set(missing))


def missing_glyphs(fig: Figure) -> list[str]:
    """The warnings matplotlib gives while drawing ``fig`` about characters no font in the list has
    (e.g. Hangul under DejaVu Sans alone): empty when every glyph rendered."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        FigureCanvasAgg(fig).draw()
    return [str(w.message) for w in caught if "missing from font" in str(w.message)]
