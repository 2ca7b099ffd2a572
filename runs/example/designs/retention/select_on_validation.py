"""How design (h)'s trained families are chosen: the 200-demo warm-up of seed 0 (what
`python -m course_utils sft` writes with its defaults, the start of both arms) answers the 100
VALIDATION prompts (never test) greedily and 16 times at temperature 1; the rule
``retention.choose_trained_families`` (fixed before these numbers were read) picks up to 4
families: open answers only (on yes_no_parity and count_words, answers from 2 and 5 labels,
pass@16 counts lucky guesses), pass@16 >= 0.3 (the checker pays PPO for something), the most
room pass@16 - greedy first. The other families measure forgetting.

    python runs/example/designs/retention/select_on_validation.py --model runs/sft-cpu/model

writes selection_validation.json next to this file and prints the chosen families.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from course_utils import retention, sft, tasks
from course_utils.models import load_bundle
from course_utils.trainer import balanced_subset

HERE = Path(__file__).resolve().parent


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="runs/sft-cpu/model", help="the seed-0 200-demo warm-up's model folder")
    p.add_argument("--samples", type=int, default=16)
    args = p.parse_args(argv)
    config = json.loads((Path(args.model).parent / "metrics.json").read_text())["config"]
    warm_up = {k: config[k] for k in ("model", "demos", "epochs", "seed", "demo_families", "learning_rate")}
    if (warm_up["demos"], warm_up["epochs"], warm_up["seed"], warm_up["demo_families"]) != (200, 1, 0, []):
        raise SystemExit(f"{args.model} is not the default 200-demo warm-up of seed 0: {warm_up}")
    t0 = time.perf_counter()
    bundle = load_bundle(args.model, device="cpu", seed=0)
    records = balanced_subset(tasks.load_split("validation"), 100)
    greedy = sft.pass_rates(bundle, records, 16)["per_family"]
    sampled = sft.sampled_pass_rates(bundle, records, samples=args.samples, max_new_tokens=16, seed=0)
    pass_k = {f: v["pass_at_k"] for f, v in sampled["per_family"].items()}
    closed = [name for name, family in tasks.TASK_FAMILIES.items() if family.labels]
    try:
        chosen = retention.choose_trained_families(greedy, pass_k, closed_label=closed)
    except ValueError as refused:  # the numbers are kept all the same: the design then needs another rule
        print(f"no subset: {refused}")
        chosen = []
    others = sorted(set(greedy) - set(chosen))
    out = {"split": "validation", "prompts": len(records), "warm_up": warm_up, "samples": args.samples,
           "greedy": greedy, "pass_at_1_sampled": {f: v["pass_at_1"] for f, v in sampled["per_family"].items()},
           f"pass_at_{args.samples}": pass_k,
           "rule": "open-answer families (not " + ", ".join(closed) + ") with pass@16 >= 0.3 and pass@16 > greedy; "
                   "up to 4, the largest pass@16 - greedy first (retention.choose_trained_families)",
           "train_families": chosen, "other_families": others,
           "greedy_trained_mean": retention.family_share(greedy, chosen) if chosen else None,
           "greedy_others_mean": retention.family_share(greedy, others),
           "seconds": time.perf_counter() - t0}
    (HERE / "selection_validation.json").write_text(json.dumps(out, indent=1) + "\n")
    for f in sorted(greedy):
        print(f"{f:<19} greedy {greedy[f]:.2f}  pass@{args.samples} {pass_k[f]:.2f}  {'TRAIN' if f in chosen else ''}")
    print(f"train on {' '.join(chosen)}; the others start at {out['greedy_others_mean']:.0f}% greedy")
    return out


if __name__ == "__main__":
    main()
