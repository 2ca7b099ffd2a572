#!/bin/bash
# Design (f), noisy teacher at 0.5 (habit style): the 200-demo warm-up on noisy demos, then PPO on the LEARNED reward model (trained first from the preference pairs, `rm train` defaults, seed 0: labelers who cannot write a good answer can still judge one), beta = 0.2 (the pipeline's better learned-RM setting, rlhf_cpu + kl_coef=0.2), 15 training minutes in all, 3 seeds.
cd /tmp/arm_f05r
export HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false TRL_EXPERIMENTAL_SILENCE=1
echo "commit $(cat COMMIT 2>/dev/null)"; date; lscpu | grep -E "Model name"; grep -o -w -E "avx2|avx512f|avx512_bf16|avx512_vnni|amx_bf16|fma" /proc/cpuinfo | sort -u | tr '\n' ' '; echo
export COURSE_RM_DIR=/tmp/arm_f05r/out/reward_model
/work/main/.venv/bin/python -m course_utils rm train --out $COURSE_RM_DIR --no-progress
date
/work/main/.venv/bin/python -m course_utils bench-learning --config configs/rlhf_cpu.yaml --set kl_coef=0.2 --sft --demo-noise 0.5 --demo-noise-style habit --seeds 0 1 2 --minutes 15 --parallel 1 --out /tmp/arm_f05r/out/sft_ppo_learned_rm_noise0.5.json
date
