#!/bin/bash
# Design (f), noisy teacher at 0.25 (habit style): the 200-demo warm-up on noisy demos (50 of them a labeler's habitual mistake), then PPO on the checker (cpu_sft preset), 15 training minutes in all, seeds 0, 1 and 2.
cd /tmp/arm_f025p
export HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false TRL_EXPERIMENTAL_SILENCE=1
echo "commit $(cat COMMIT 2>/dev/null)"; date; lscpu | grep -E "Model name"; grep -o -w -E "avx2|avx512f|avx512_bf16|avx512_vnni|amx_bf16|fma" /proc/cpuinfo | sort -u | tr '\n' ' '; echo
/work/main/.venv/bin/python -m course_utils bench-learning --config configs/cpu_sft.yaml --sft --demo-noise 0.25 --demo-noise-style habit --seeds 0 1 2 --minutes 15 --parallel 1 --out /tmp/arm_f025p/out/sft_ppo_checker_noise0.25.json
date
