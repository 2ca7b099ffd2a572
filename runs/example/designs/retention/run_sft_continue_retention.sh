#!/bin/bash
# Design (h), retention: the 200-demo warm-up (all ten families), then SFT from the warm-up's model on every train
# demonstration of FAM (160) for the rest of the 15 training minutes (warm-up inside), evaluated on every family
# every 60 steps; 3 seeds, one run at a time. Then, per seed, every family's greedy test pass rate (warm-up and
# final) and KL(pi_start || pi) on the test prompts of FAM and of the others ("retention" in the JSON).
# FAM: chosen on the validation split by select_on_validation.py (selection_validation.json).
# Run from a git archive of the commit (cd there), nothing else timed on the machine.
cd /tmp/arm_h2
export HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false TRL_EXPERIMENTAL_SILENCE=1
FAM="lowercase_word number_only bracket_word comma_no_spaces"
echo "commit $(cat COMMIT 2>/dev/null)"; date; lscpu | grep -E "Model name"; grep -o -w -E "avx2|avx512f|avx512_bf16|avx512_vnni|amx_bf16|fma" /proc/cpuinfo | sort -u | tr '\n' ' '; echo
/work/main/.venv/bin/python -m course_utils bench-learning --sft-continue --train-families $FAM --seeds 0 1 2 --minutes 15 --parallel 1 --out /tmp/arm_h2/out/sft_continue_retention.json
date
