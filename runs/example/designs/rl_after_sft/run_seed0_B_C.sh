#!/bin/bash
# Design 1 (runs/example/designs/PREREGISTERED.md), seed 0, after arm A on the same host: the sampled measures
# (pass@1, pass@16, token entropy on 100 validation prompts, T = 1, the seed's own sampling seed) of the start
# and of A; then arm B (PPO on the checker, configs/cpu_sft.yaml, from the start's merged model) and arm C
# (B plus the kit's RLOO settings and Reinforce-Rej's dropped uniform groups), 30 training minutes each, greedy
# test and unseen phrasings at 5 and 15 of their minutes and at the end; each measured after it ran. One timed
# run at a time. Run from a `git archive` of the commit in COMMIT.
set -euo pipefail
S=0
cd /tmp/d1_seed${S}_BC
export HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false TRL_EXPERIMENTAL_SILENCE=1
PY=/work/main/.venv/bin/python
OUT=/tmp/d1_seed$S/out
echo "commit $(cat COMMIT)"; date -u; lscpu | grep -E "Model name"
grep -o -w -E "avx2|avx512f|avx512_bf16|avx512_vnni|amx_bf16|fma" /proc/cpuinfo | sort -u | tr '\n' ' '; echo
$PY -m course_utils measure $OUT/d1_start-seed$S $OUT/d1_A-seed$S
date -u
COMMON="seed=$S output_dir=$OUT model=$OUT/d1_start-seed$S/model threads=2 max_train_minutes=30 total_updates=1000 eval_at_minutes=[5,15]"
$PY -m course_utils ppo --config configs/cpu_sft.yaml --overwrite --set run_name=d1_B-seed$S $COMMON
date -u
$PY -m course_utils measure $OUT/d1_B-seed$S
date -u
$PY -m course_utils ppo --config configs/cpu_sft.yaml --overwrite --set run_name=d1_C-seed$S $COMMON \
    samples_per_prompt=4 group_baseline=true ppo_epochs=4 target_kl=0.02 drop_uniform_groups=true
date -u
$PY -m course_utils measure $OUT/d1_C-seed$S
date -u
