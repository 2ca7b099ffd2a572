"""Draw gains.png: the preset and every variant in this folder, gain per seed and mean ± std.

Run from the repository root: python runs/example/experiments/plot_gains.py
"""
import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
from course_utils.bench_learning import plot_variant_gains  # noqa: E402

here = Path(__file__).resolve().parent
variants = {  # label: the report's folder (the preset's report sits one level up)
    "preset (configs/cpu.yaml)": here.parent,
    "plain-wrong tier 0.1": here / "plain_wrong_0.1",
    "learning_rate 1e-3": here / "lr_1e-3",
    "temperature 0.7": here / "temp_0.7",
    "ppo_epochs 1": here / "ppo_epochs_1",
}
reports = {name: json.loads((folder / "learning.json").read_text())
           for name, folder in variants.items() if (folder / "learning.json").is_file()}
fig = plot_variant_gains(reports)
fig.savefig(here / "gains.png", dpi=100)
print("wrote", here / "gains.png", "from", ", ".join(reports))
