#!/bin/bash
# Design 1 (runs/example/designs/PREREGISTERED.md), seed 0, arm A: filtered SFT continued from the start's
# merged model and pool (run_seed0_start_A.sh made the start; its arm-A line failed at once on a command-line
# parse of --eval-at-minutes, fixed in this script's commit) for 30 more training minutes, greedy test and
# unseen phrasings at 5 and 15 of its minutes and at the end. Run from a `git archive` of the commit in COMMIT.
set -euo pipefail
S=0
cd /tmp/d1_seed${S}_A
export HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false TRL_EXPERIMENTAL_SILENCE=1
PY=/work/main/.venv/bin/python
OUT=/tmp/d1_seed$S/out
echo "commit $(cat COMMIT)"; date -u; lscpu | grep -E "Model name"
grep -o -w -E "avx2|avx512f|avx512_bf16|avx512_vnni|amx_bf16|fma" /proc/cpuinfo | sort -u | tr '\n' ' '; echo
TEACHER="--demos 400 --epochs 1000 --demo-noise 0.25 --demo-noise-style habit --demo-filter --self-samples 4 --resample-every 25"
$PY -m course_utils sft --seed $S --run-name d1_A-seed$S --output-dir $OUT --threads 2 --overwrite $TEACHER \
    --model $OUT/d1_start-seed$S/model --init-pool $OUT/d1_start-seed$S/pool.jsonl \
    --max-train-minutes 30 --eval-at-minutes 5 15
date -u
