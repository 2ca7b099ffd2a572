#!/bin/bash
# Design (h), retention: the 200-demo warm-up (all ten families), then PPO on the checker (cpu_sft preset) on the
# train prompts of FAM only, evaluated on every family every 10 updates; 15 training minutes in all (warm-up
# inside), 3 seeds, one run at a time. Then, per seed, every family's greedy test pass rate (warm-up and final)
# and KL(pi_start || pi) on the test prompts of FAM and of the others ("retention" in the JSON).
# FAM: chosen on the validation split by select_on_validation.py (selection_validation.json).
# Run from a git archive of the commit (cd there), nothing else timed on the machine.
cd /tmp/arm_h1
export HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false TRL_EXPERIMENTAL_SILENCE=1
FAM="lowercase_word number_only bracket_word comma_no_spaces"
echo "commit $(cat COMMIT 2>/dev/null)"; date; lscpu | grep -E "Model name"; grep -o -w -E "avx2|avx512f|avx512_bf16|avx512_vnni|amx_bf16|fma" /proc/cpuinfo | sort -u | tr '\n' ' '; echo
/work/main/.venv/bin/python -m course_utils bench-learning --config configs/cpu_sft.yaml --sft --train-families $FAM --seeds 0 1 2 --minutes 15 --parallel 1 --out /tmp/arm_h1/out/sft_ppo_checker_retention.json
date
