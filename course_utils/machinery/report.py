"""The run report: curves as PNG and a ``report.md`` that ties a run together.

``plot_training_curves`` is pure (metrics in, Figure out): the notebooks call it for live plots and
``write_report`` calls it for the saved picture.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from course_utils.machinery import safe_files
from course_utils.machinery.versions import package_versions

# (metric key, panel title, what a learner should look for)
CURVES = [
    ("score", "reward-model / checker score", "should rise; if it rises while pass rate does not, suspect hacking"),
    ("kl_per_sequence", "KL to reference (nats / response)", "a sudden jump means the policy left the reference"),
    ("ratio_mean", "mean ratio pi/pi_old", "stays near 1; drift means stale data or a large step"),
    ("policy_clipfrac", "policy clip fraction", "share of response tokens on which the clip was active, i.e. the "
     "ratio had left [1 - ε, 1 + ε] on the side its advantage pushes (r > 1 + ε with A > 0, r < 1 - ε with A < 0; "
     "a ratio outside the band on the other side is not counted), measured before each optimizer step and "
     "averaged over the update's steps; it grows with the learning rate and the epochs, and staying above about "
     "0.2 means the steps outrun the trust region (target_kl stops the epochs early)"),
    ("value_loss", "value loss", "should fall; growth means the critic diverges"),
    ("response_length", "response length (tokens)", "collapse to 1-2 tokens or a jump to the max is a warning"),
]


def smooth(values: list[float], window: int = 5) -> np.ndarray:
    """Trailing moving average (NaN-aware) so noisy curves can be read."""
    x = np.asarray(values, dtype=float)
    out = np.empty_like(x)
    for i in range(len(x)):
        chunk = x[max(0, i - window + 1):i + 1]
        chunk = chunk[np.isfinite(chunk)]
        out[i] = chunk.mean() if len(chunk) else np.nan
    return out


def plot_training_curves(history: list[dict], evals: list[dict] | None = None, window: int = 5):
    """Seven panels: the six CURVES against the update number, plus the held-out pass rate."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 4, figsize=(15, 6.5))
    steps = [h["update"] for h in history]
    for ax, (key, title, _) in zip(axes.flat, CURVES):
        values = [h.get(key, np.nan) for h in history]
        ax.plot(steps, values, color="tab:blue", alpha=0.3, lw=1, label="each update")
        if values:
            ax.plot(steps, smooth(values, window), color="tab:blue", lw=2, label=f"mean of the last {window}")
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("update")
        ax.grid(alpha=0.3)
    if history:  # one key for every curve panel: which line is which
        axes.flat[0].legend(fontsize=8, loc="best")
    ax = axes.flat[len(CURVES)]
    if evals:
        # The whole 0-100 scale with each evaluation's binomial standard error, sqrt(p(1-p)/n) over its
        # n prompts: on 100 prompts a swing of a few points is noise, and a zoomed axis would hide that.
        rates = np.array([e["pass_rate"] for e in evals], dtype=float)
        counts = np.array([len(e.get("answers") or []) for e in evals], dtype=float)
        se = np.where(counts > 0, np.sqrt(rates * (1 - rates) / np.maximum(counts, 1)), 0.0)
        ax.errorbar([e["update"] for e in evals], 100 * rates, yerr=100 * se, fmt="o-", color="tab:green",
                    capsize=3)
        ax.set_ylim(0, 100)
    ax.set_title("held-out pass rate (%, ± 1 SE)", fontsize=10)
    ax.set_xlabel("update")
    ax.grid(alpha=0.3)
    axes.flat[-1].axis("off")
    fig.tight_layout()
    return fig


def _per_task_table(before: dict, after: dict, outcomes: dict | None = None) -> str:
    """Pass rate per task before/after; with ``outcomes`` (``run_checks.task_outcomes``) also the
    mean partial-credit reward, the hacks flagged and the verdict (learned / hacked / ...)."""
    outcomes = outcomes or {}
    head = "| task | before | after | change |"
    rule = "|---|---:|---:|---:|"
    if outcomes:
        head += " reward before → after | hacks flagged | verdict |"
        rule += "---:|---|---|"
    lines = [head, rule]
    for task in sorted(set(before) | set(after)):
        b, a = before.get(task, float("nan")), after.get(task, float("nan"))
        row = f"| {task} | {b:.0%} | {a:.0%} | {100 * (a - b):+.0f} pts |"
        if outcomes:
            o = outcomes.get(task)
            row += (f" {o['reward_before']:.2f} → {o['reward_after']:.2f} | {', '.join(o['flags']) or '-'} | "
                    f"**{o['verdict']}** |" if o else " | | |")
        lines.append(row)
    return "\n".join(lines)


def _findings(outcomes: dict) -> list[str]:
    found = [f"- {task}: {text}" for task, o in sorted(outcomes.items()) for text in o["findings"]]
    return ["", "What the hacking detector found in the answers after training:", "", *found] if found else []


def _samples_table(before: list[dict], after: list[dict]) -> str:
    after_by_id = {s["id"]: s for s in after}
    lines = ["| task | prompt | before | after |", "|---|---|---|---|"]
    clean = lambda s: s.replace("|", "\\|").replace("\n", " ⏎ ")[:120]  # noqa: E731
    for s in before:
        a = after_by_id.get(s["id"], {})
        mark = lambda x: ("✅ " if x.get("passed") else "❌ ") + clean(x.get("answer", ""))  # noqa: E731
        lines.append(f"| {s['family']} | {clean(s['prompt'])} | {mark(s)} | {mark(a)} |")
    return "\n".join(lines)


def write_report(run_dir: Path, config, history: list[dict], evals: list[dict], summary: dict,
                 manifest: dict) -> Path:
    """Write curves.png, versions.json, samples and report.md into ``run_dir``."""
    import matplotlib

    matplotlib.use("Agg", force=False)
    import matplotlib.pyplot as plt

    run_dir = Path(run_dir)
    fig = plot_training_curves(history, evals)
    fig.savefig(run_dir / "curves.png", dpi=90)
    plt.close(fig)
    versions = package_versions()
    safe_files.write_json(run_dir / "versions.json", versions)
    before, after = evals[0], evals[-1]
    safe_files.write_json(run_dir / "samples.json", {"before": before["samples"], "after": after["samples"]})
    last = history[-1] if history else {}
    total_time = sum(h.get("time_update_s", 0.0) for h in history)
    md = [
        f"# PPO run report: {config.run_name}",
        "",
        f"- model: `{config.model}` (LoRA rank {config.lora_rank}), reward: `{config.reward}`",
        f"- updates: {summary['updates']} of {config.total_updates}, batch {config.batch_size}, "
        f"{config.ppo_epochs} epochs x {config.num_minibatches} minibatches, lr {config.learning_rate}, "
        f"KL coef {config.kl_coef} ({'adaptive' if config.adaptive_kl else 'fixed'}), temperature {config.temperature}",
        f"- training time: {total_time / 60:.1f} min ({total_time / max(len(history), 1):.1f} s per update)",
        f"- stop: {summary['stop'] or summary.get('finished') or 'completed all updates'}",
        f"- held-out pass rate: **{before['pass_rate']:.0%} → {after['pass_rate']:.0%}** "
        f"({len(evals)} evaluations; updates {[e['update'] for e in evals]})",
        *kept_lines(summary),
        "",
        "## Curves",
        "",
        "![curves](curves.png)",
        "",
        *[f"- **{title}**: {hint}." for _, title, hint in CURVES],
        "",
        "## Pass rate per task (held-out, greedy)",
        "",
        "Verdicts: *learned* = pass rate up by 10+ points with no hack flagged; *hacked* = the detector "
        "flagged a pattern (placeholder copied, prompt echoed, one constant answer, length collapse) that "
        "the answers before training did not have (a flag the starting model already earned is listed, "
        "not counted); *reward only* = more partial credit without passing; *worse* = pass rate down by "
        "10+ points."
        if summary.get("task_outcomes") else "",
        "",
        _per_task_table(before["pass_rate_per_task"], after["pass_rate_per_task"], summary.get("task_outcomes")),
        *_findings(summary.get("task_outcomes") or {}),
        "",
        "## Sample answers before and after",
        "",
        _samples_table(before["samples"], after["samples"]),
        "",
        "## Last update",
        "",
        "```json",
        safe_files.dumps({k: (round(v, 4) if isinstance(v, float) else v) for k, v in last.items()}, indent=1),
        "```",
        "",
        "## Reproduce",
        "",
        "Config in `config.json`, package versions in `versions.json`, model manifest in `manifest.json`, "
        "per-update metrics in `metrics.jsonl`, evaluations in `evals.jsonl`.",
        "",
        "```json",
        json.dumps({k: manifest.get(k) for k in list(manifest)[:12]}, indent=1, default=str),
        "```",
        "",
    ]
    path = run_dir / "report.md"
    path.write_text("\n".join(md))
    return path


def kept_lines(summary: dict) -> list[str]:
    """What the run kept on disk: the last-known-good checkpoint and the best held-out adapter."""
    lines = [f"- kept: `checkpoint/` = the last-known-good state (update {summary.get('checkpoint_update', '-')}, "
             "only updates that broke no stop rule are saved); `policy/` = the final adapter"]
    best = summary.get("best")
    if best:
        lines.append(f"- best held-out adapter: `{best['folder']}/` from update {best['update']} at "
                     f"{best['pass_rate']:.0%} (chosen on the evaluation prompts themselves, so that figure "
                     "is optimistic; judge it on prompts it was not chosen on)")
    return lines


def summary_lines(summary: dict, run_dir: Path) -> list[str]:
    """A few lines for the terminal at the end of ``ppo``: how the run ended, the held-out pass
    rate before and after, the task families that moved, and where the files are."""
    ending = (f"stopped by a rule: {summary['stop']}" if summary.get("stop")
              else summary.get("finished") or "all updates done")
    lines = [f"{summary['updates']} updates, {summary['training_minutes']:.1f} training minutes; {ending}",
             f"held-out pass rate: {summary['pass_rate_before']:.0%} -> {summary['pass_rate_after']:.0%}"]
    outcomes = summary.get("task_outcomes") or {}
    moved = [f"{family} {o['pass_before']:.0%} -> {o['pass_after']:.0%} ({o['verdict']})"
             for family, o in outcomes.items() if o["verdict"] != "no change"]
    if outcomes:
        lines.append("families that moved: " + ("; ".join(moved) if moved else "none"))
    if summary.get("best"):
        best = summary["best"]
        lines.append(f"best held-out checkpoint: update {best['update']} at {best['pass_rate']:.0%} "
                     f"({run_dir / best['folder']})")
    lines.append(f"report: {run_dir / 'report.md'}   (numbers: summary.json, metrics.jsonl, evals.jsonl)")
    return lines


def plot_sft(losses: list[float], before: dict, after: dict, window: int = 5):
    """Two panels: the SFT loss per step (raw and smoothed), and the held-out pass rate per task
    family before and after the warm-up. A plain Figure, outside pyplot, so that a notebook shows it once."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(12, 3.8))
    left, right = fig.subplots(1, 2)
    steps = np.arange(1, len(losses) + 1)
    left.plot(steps, losses, color="tab:blue", alpha=0.3, lw=1, label="each step (one batch)")
    left.plot(steps, smooth(losses, window), color="tab:blue", lw=2, label=f"mean of {window} steps")
    left.set(xlabel="optimizer step", ylabel="loss (nats per answer token)", title="SFT loss")
    left.grid(alpha=0.3)
    left.legend()
    families = list(before["per_family"])
    y = np.arange(len(families))
    right.barh(y + 0.2, [100 * before["per_family"][f] for f in families], 0.4, label="before", color="tab:gray")
    right.barh(y - 0.2, [100 * after["per_family"].get(f, 0.0) for f in families], 0.4, label="after", color="tab:green")
    right.set_yticks(y, families)
    right.invert_yaxis()
    right.set(xlabel="held-out pass rate (%)", xlim=(0, 100), title="pass rate per task family")
    right.legend(loc="lower right")
    fig.tight_layout()
    return fig


def write_sft_report(run_dir: Path, metrics: dict) -> Path:
    """``report.md``, ``loss.png`` and ``metrics.json`` of an SFT warm-up."""
    run_dir.mkdir(parents=True, exist_ok=True)
    cfg = metrics["config"]
    main_set, unseen_set = list(metrics["before"])
    before, after = metrics["before"][main_set], metrics["after"][main_set]
    unseen_before, unseen_after = metrics["before"][unseen_set], metrics["after"][unseen_set]
    fig = plot_sft(metrics["loss"], before, after)
    fig.savefig(run_dir / "loss.png", dpi=110)  # a plain Figure: nothing for pyplot to close
    rows = [f"| {f} | {before['per_family'][f]:.0%} | {after['per_family'].get(f, 0.0):.0%} | "
            f"{unseen_before['per_family'].get(f, 0.0):.0%} | {unseen_after['per_family'].get(f, 0.0):.0%} |"
            for f in before["per_family"]]
    md = [f"# SFT warm-up: {cfg['run_name']}", "",
          f"- model: `{cfg['model']}`, LoRA rank {cfg['lora_rank']} on every projection, lr {cfg['learning_rate']}, "
          f"batch {cfg['batch_size']}, {cfg['epochs']} epoch(s)",
          f"- {metrics['demos']} train-split demonstrations, {metrics['steps']} steps in "
          f"{metrics['train_seconds']:.0f} s ({metrics['threads']} threads)",
          f"- loss (nats per answer token): {metrics['loss'][0]:.3f} at the first step, "
          f"{np.mean(metrics['loss'][-5:]):.3f} over the last five",
          f"- held-out pass rate ({main_set}, greedy, strict checker): "
          f"**{before['pass_rate']:.0%} → {after['pass_rate']:.0%}**; the same prompts in phrasings no "
          f"training prompt uses ({unseen_set}): **{unseen_before['pass_rate']:.0%} → {unseen_after['pass_rate']:.0%}**",
          "- the warmed-up model (LoRA folded into the weights) is in `model/`: PPO's start and reference",
          "", "![loss and pass rates](loss.png)", "",
          f"| task family | {main_set} before | after | {unseen_set} before | after |", "|---|---|---|---|---|",
          *rows, ""]
    (run_dir / "report.md").write_text("\n".join(md), encoding="utf-8")
    safe_files.write_json(run_dir / "metrics.json", metrics, indent=1)
    return run_dir / "report.md"
