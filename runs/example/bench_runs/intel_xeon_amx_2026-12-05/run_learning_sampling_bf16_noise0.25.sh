#!/bin/bash
# Issue 32's open decision, measured at half the cost of run_learning_sampling_dtype.sh: its float32 control
# already exists on this host. Design (f)'s PPO-on-the-checker arm at noise 0.25 (cpu_sft.yaml, the 200-demo
# noisy warm-up + PPO on the checker, old log-probs from the sampler) ran in float32 on this same Intel AMX machine
# (runs/example/designs/noisy/run_sft_ppo_checker_noise0.25.sh: test 48 / 49 / 56, 80 / 79 / 79 updates). This
# script runs it again with the one change sampling_dtype=bfloat16, 3 seeds x 15 training minutes, one run at a
# time, nothing else timed. The warm-ups do not sample, so they should repeat the control's (36 / 44 / 44);
# compare the held-out pass rates paired by seed, and the updates each seed fits into its 15 minutes.
# Usage: from a git archive of the commit in /tmp/arm_bf16 (written by the launcher), bash this script there.
cd /tmp/arm_bf16
export HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false TRL_EXPERIMENTAL_SILENCE=1
echo "commit $(cat COMMIT 2>/dev/null)"; date; lscpu | grep -E "Model name"; grep -o -w -E "avx2|avx512f|avx512_bf16|avx512_vnni|amx_bf16|fma" /proc/cpuinfo | sort -u | tr '\n' ' '; echo
/work/main/.venv/bin/python -m course_utils bench-learning --config configs/cpu_sft.yaml --sft --demo-noise 0.25 --demo-noise-style habit --set sampling_dtype=bfloat16 --seeds 0 1 2 --minutes 15 --parallel 1 --out /tmp/arm_bf16/out/sft_ppo_checker_noise0.25_sampling_bfloat16.json
date
