#!/bin/bash
# Design 1 (RL after the best SFT, runs/example/designs/PREREGISTERED.md), one seed, every stage in the
# pre-registered order on one host: the shared start (filtered SFT at noise 0.25, habit style, 10 training
# minutes, its LoRA matrices kept), arm A (filtered SFT continued from the start's merged model and pool, 30
# more minutes), the sampled measures of the start and of A, arm B (PPO on the checker, configs/cpu_sft.yaml,
# from the start's merged model, 30 minutes), B's measures, arm C (B plus RLOO groups, 4 epochs, target KL
# 0.02, uniform groups dropped), C's measures. The same commands as seed 0's two scripts
# (run_seed0_start_A.sh, run_seed0_B_C.sh), the seed as an argument. A stage whose output is complete is
# skipped, so a run cut off can be started again (a stage cut off is rerun whole).
#   usage: bash run_seed.sh SEED   (run from a `git archive` of the commit written in COMMIT)
set -euo pipefail
S=${1:?usage: bash run_seed.sh SEED}
export HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false TRL_EXPERIMENTAL_SILENCE=1
PY=${PY:-/work/main/.venv/bin/python}
OUT=${OUT:-/tmp/d1_seed$S/out}
source "$(dirname "$0")/../timed_run.sh"  # autogroup off, nice -10, commit and host; done_sft, done_ppo
measured() { [ -f "$OUT/$1/sampled_validation.json" ]; }
TEACHER="--demos 400 --epochs 1000 --demo-noise 0.25 --demo-noise-style habit --demo-filter --self-samples 4 --resample-every 25"
if ! done_sft d1_start-seed$S; then
  $PY -m course_utils sft --seed $S --run-name d1_start-seed$S --output-dir $OUT --threads 2 --overwrite $TEACHER \
      --max-train-minutes 10 --save-adapter
  date -u
fi
if ! done_sft d1_A-seed$S; then
  $PY -m course_utils sft --seed $S --run-name d1_A-seed$S --output-dir $OUT --threads 2 --overwrite $TEACHER \
      --model $OUT/d1_start-seed$S/model --init-pool $OUT/d1_start-seed$S/pool.jsonl \
      --max-train-minutes 30 --eval-at-minutes 5 15
  date -u
fi
for run in d1_start-seed$S d1_A-seed$S; do measured $run || $PY -m course_utils measure $OUT/$run; done
date -u
COMMON="seed=$S output_dir=$OUT model=$OUT/d1_start-seed$S/model threads=2 max_train_minutes=30 total_updates=1000 eval_at_minutes=[5,15]"
if ! done_ppo d1_B-seed$S; then
  $PY -m course_utils ppo --config configs/cpu_sft.yaml --overwrite --set run_name=d1_B-seed$S $COMMON
  date -u
fi
measured d1_B-seed$S || $PY -m course_utils measure $OUT/d1_B-seed$S
date -u
if ! done_ppo d1_C-seed$S; then
  $PY -m course_utils ppo --config configs/cpu_sft.yaml --overwrite --set run_name=d1_C-seed$S $COMMON \
      samples_per_prompt=4 group_baseline=true ppo_epochs=4 target_kl=0.02 drop_uniform_groups=true
  date -u
fi
measured d1_C-seed$S || $PY -m course_utils measure $OUT/d1_C-seed$S
date -u
