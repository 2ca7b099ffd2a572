"""Assemble the two finished seeds of the stopped temperature-0.7 experiment with the library's own
read_run / summarise / plot functions (the third seed was stopped on purpose, see the README).

A record of how learning.json and learning.png here were made, not something to rerun: the run folders
it read (/tmp/expA/...) were not kept. Usage then: python assemble.py <output folder>."""
import json, sys
from pathlib import Path
from course_utils import bench_learning as bl
root = Path("/tmp/expA/temp_0.7/learning")
seeds = [bl.read_run(root / f"cpu-seed{s}") for s in (0, 1)]
for s in seeds:
    s["run_dir"] = f"(not kept) cpu-seed{s['seed']}"
report = {"config": "configs/cpu.yaml", "overrides": ["temperature=0.7"], "minutes": 15.0, "parallel": 1,
          "threads_per_run": 2, "seeds": seeds, "failures": [],
          "stopped_early": "seed 2 was stopped on purpose after 4 updates: after seeds 0 and 1 (+9 and -5 points) "
                           "the 3-seed mean would reach the preset's +11.7 only if seed 2 gained +31 points",
          "summary": bl.summarise(seeds)}
out = Path(sys.argv[1]); out.mkdir(parents=True, exist_ok=True)
(out / "learning.json").write_text(json.dumps(report, indent=2) + "\n")
fig = bl.plot_learning_curves(seeds, 15.0); fig.savefig(out / "learning.png", dpi=100)
print(json.dumps(report["summary"], indent=1)[:1500])
