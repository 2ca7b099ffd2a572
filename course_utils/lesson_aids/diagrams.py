"""Two pictures for lesson 1: one PPO cycle (who sends what to whom, with shapes) and the whole RLHF
pipeline (SFT, reward model, PPO). Boxes and arrows drawn with matplotlib; pure: no arguments, a
Figure out."""

from __future__ import annotations

from matplotlib.figure import Figure
from matplotlib.patches import FancyBboxPatch

_MODEL = "#dbeafe"    # a network
_FROZEN = "#e5e7eb"   # a network that never trains
_DATA = "#fef9c3"     # tensors and text
_STEP = "#dcfce7"     # a computation of the update


def _box(ax, x: float, y: float, text: str, colour: str, width: float = 0.2, height: float = 0.11) -> None:
    ax.add_patch(FancyBboxPatch((x - width / 2, y - height / 2), width, height, boxstyle="round,pad=0.01",
                                facecolor=colour, edgecolor="#374151", linewidth=1))
    ax.text(x, y, text, ha="center", va="center", fontsize=7.5, wrap=True)


def _arrow(ax, start: tuple[float, float], end: tuple[float, float], label: str = "", offset=(0.0, 0.015),
           curve: float = 0.0) -> None:
    ax.annotate("", xy=end, xytext=start, arrowprops=dict(arrowstyle="->", color="#374151", lw=1,
                                                          connectionstyle=f"arc3,rad={curve}"))
    if label:
        mid = ((start[0] + end[0]) / 2 + offset[0], (start[1] + end[1]) / 2 + offset[1])
        ax.text(*mid, label, ha="center", va="bottom", fontsize=6.5, color="#1f2937")


def _canvas(width: float, height: float):
    fig = Figure(figsize=(width, height))
    ax = fig.subplots()
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    ax.axis("off")
    return fig, ax


def ppo_cycle_figure() -> Figure:
    """One PPO update: the rollout (top row), the frozen forwards and the score (middle), the
    advantage arithmetic and the update (bottom), with the tensor each arrow carries."""
    fig, ax = _canvas(11, 5.2)
    _box(ax, 0.08, 0.85, "prompts\n(chat template,\nleft padded)", _DATA, width=0.15)
    _box(ax, 0.37, 0.85, "policy π_θ = π_old\n(LoRA on) + value head", _MODEL)
    _box(ax, 0.66, 0.85, "responses\n+ response mask m\n[B, T]", _DATA, width=0.17)
    _box(ax, 0.91, 0.85, "reward model\nor checker (frozen)", _FROZEN, width=0.16)
    _box(ax, 0.37, 0.5, "reference π_ref: the same weights,\nLoRA off, frozen; reads the same\n"
                        "prompt + response tokens", _FROZEN, width=0.26)
    _box(ax, 0.74, 0.5, "shaped rewards\nr_t = −β·KL_t\n+ score on the last real token", _STEP, width=0.24)
    _box(ax, 0.74, 0.15, "GAE, backwards:\nA_t, returns R_t = A_t + V_t;\nwhiten A over real tokens", _STEP, width=0.24)
    _box(ax, 0.33, 0.15, "PPO update: ppo_epochs × minibatches of\nclipped policy loss + vf_coef · value loss\n"
                         "− ent_coef · entropy (ratio π_θ(a_t) / π_old(a_t) per token)", _STEP, width=0.34, height=0.13)
    _arrow(ax, (0.155, 0.85), (0.27, 0.85), "query ids [B, Lq]")
    _arrow(ax, (0.47, 0.85), (0.575, 0.85), "sample")
    _arrow(ax, (0.745, 0.85), (0.83, 0.85), "text")
    _arrow(ax, (0.91, 0.79), (0.82, 0.56), "score [B]", offset=(0.05, 0.0))
    _arrow(ax, (0.66, 0.79), (0.7, 0.56), "mask", offset=(-0.03, 0.0))
    _arrow(ax, (0.47, 0.79), (0.63, 0.56), "log π_old [B, T]", offset=(0.01, 0.03))
    _arrow(ax, (0.39, 0.79), (0.66, 0.21), "V [B, T]: to GAE only,\nnot to the shaping", offset=(-0.02, -0.2))
    _arrow(ax, (0.5, 0.5), (0.62, 0.5), "log π_ref [B, T]", offset=(0.0, 0.012))
    _arrow(ax, (0.74, 0.44), (0.74, 0.21), "r [B, T]", offset=(0.04, 0.0))
    _arrow(ax, (0.62, 0.15), (0.5, 0.15), "A, R [B, T]", offset=(0.0, 0.04))
    _arrow(ax, (0.2, 0.22), (0.3, 0.79), curve=-0.3)
    # the return arrow bows left to about x = 0.2 at mid-height: its label sits just outside the bow
    ax.text(0.185, 0.5, "new LoRA and\nvalue-head weights:\nthe next update's π_old", ha="right", va="center",
            fontsize=6.5, color="#1f2937")
    ax.set_title("One PPO update: who sends what to whom (B responses, T response positions)", fontsize=10)
    return fig


def rlhf_pipeline_figure() -> Figure:
    """The three stages in order, what each trains on and what it hands to the next."""
    fig, ax = _canvas(11, 3.2)
    _box(ax, 0.12, 0.7, "instruct model\n(SmolLM2-135M-Instruct)", _MODEL, width=0.2, height=0.22)
    _box(ax, 0.39, 0.7, "1. SFT warm-up (lesson 6a)\nLoRA on demonstrations,\nfolded into the weights", _STEP, width=0.24, height=0.22)
    _box(ax, 0.66, 0.7, "SFT model\n= PPO's start\n= PPO's reference", _MODEL, width=0.2, height=0.22)
    _box(ax, 0.39, 0.2, "2. reward model (lesson 6b)\nBradley-Terry on\npreference pairs", _STEP, width=0.24, height=0.22)
    _box(ax, 0.88, 0.45, "3. PPO (lessons 7-10)\nsample, score, KL to the\nSFT model, update", _STEP, width=0.22, height=0.22)
    _box(ax, 0.12, 0.2, "demonstrations and\npreference pairs\n(train split only)", _DATA, width=0.2, height=0.22)
    _arrow(ax, (0.22, 0.7), (0.27, 0.7))
    _arrow(ax, (0.51, 0.7), (0.56, 0.7))
    _arrow(ax, (0.76, 0.62), (0.8, 0.56), "policy + reference", offset=(0.05, 0.02))
    _arrow(ax, (0.51, 0.2), (0.77, 0.38), "frozen reward", offset=(0.02, -0.07))
    _arrow(ax, (0.22, 0.28), (0.3, 0.59), "demos", offset=(-0.04, 0.0))
    _arrow(ax, (0.22, 0.18), (0.27, 0.18), "pairs", offset=(0.0, 0.01))
    ax.text(0.88, 0.12, "judged by the task checker on held-out prompts\n(standing in for human evaluation)",
            ha="center", va="center", fontsize=7, style="italic")
    ax.set_title("The RLHF pipeline of this course", fontsize=10)
    return fig
