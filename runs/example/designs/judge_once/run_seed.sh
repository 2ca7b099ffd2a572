#!/bin/bash
# Design 2 (a judge you can ask only once, runs/example/designs/PREREGISTERED.md), one seed, every stage on
# one host: design (g)'s warm-up (200 demonstrations of the eight other families, one pass), then six arms of
# 25 training minutes from its model, trained on the 80 train prompts of lowercase_word and number_only only:
#   A   PPO on the noisy checker (configs/cpu_sft.yaml, checker_noise 0.3)      A0  the same with the true checker
#   B   the kit's filtered SFT: cumulative pool, one check per answer (0.3)     B0  the same with the true checker
#   C   filtered SFT with a fresh pool each round (0.3)
#   D   filtered SFT that re-checks: accepted after 3 passes in 3 checks (0.3)
# Evaluation is always the strict checker (each run's metrics.json / evals.jsonl; per family: the 20 test
# prompts of the two families and their unseen phrasings). A stage whose output is complete is skipped.
#   usage: bash run_seed.sh SEED   (from a `git archive` of the commit written in COMMIT)
set -euo pipefail
S=${1:?usage: bash run_seed.sh SEED}
export HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false TRL_EXPERIMENTAL_SILENCE=1
PY=${PY:-/work/main/.venv/bin/python}
OUT=${OUT:-/tmp/d2_seed$S/out}
source "$(dirname "$0")/../timed_run.sh"  # autogroup off, nice -10, commit and host; done_sft, done_ppo
TAUGHT="result_sum json_object comma_no_spaces yes_no_parity alphabetical_order count_words uppercase_word bracket_word"
TWO="lowercase_word number_only"
WARM=$OUT/d2_warm-seed$S/model
if ! done_sft d2_warm-seed$S; then
  $PY -m course_utils sft --seed $S --run-name d2_warm-seed$S --output-dir $OUT --threads 2 --overwrite --demo-families $TAUGHT
  date -u
fi
filtered() {  # NAME NOISE EXTRA...: filtered SFT on the two families' prompts only, from the warm-up
  local name=$1 noise=$2; shift 2
  done_sft $name-seed$S && return 0
  $PY -m course_utils sft --seed $S --run-name $name-seed$S --output-dir $OUT --threads 2 --overwrite --model $WARM \
      --demos 0 --epochs 1000 --self-samples 4 --resample-every 25 --self-sample-families $TWO \
      --checker-noise $noise --max-train-minutes 25 "$@"
  date -u
}
ppo() {  # NAME NOISE: PPO on the two families only, from the warm-up
  done_ppo $1-seed$S && return 0
  $PY -m course_utils ppo --config configs/cpu_sft.yaml --overwrite --set run_name=$1-seed$S seed=$S output_dir=$OUT \
      model=$WARM threads=2 max_train_minutes=25 total_updates=1000 "task_families=[lowercase_word,number_only]" \
      checker_noise=$2
  date -u
}
ppo d2_A 0.3
filtered d2_B 0.3
filtered d2_C 0.3 --self-sample-pool fresh
filtered d2_D 0.3 --accept-checks 3
ppo d2_A0 0
filtered d2_B0 0
