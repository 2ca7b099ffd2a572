#!/bin/bash
# Issue 32's open decision: does sampling from bfloat16 weight copies cost learning? Two arms of the pipeline preset
# (cpu_sft.yaml: 200-demo warm-up + PPO on the checker, old log-probs from the sampler), 3 seeds x 15 training
# minutes each, one run at a time, on ONE host with native bfloat16 (avx512_bf16 / amx_bf16), nothing else timed:
#   ARM=float32   the control on this host (the committed sft_ppo_checker arm ran on an AMD EPYC)
#   ARM=bfloat16  the same with sampling_dtype=bfloat16 (a decode step 54 -> 39 ms here; the ratio's denominator
#                 is then the bfloat16 sampler's log-prob, off the float32 policy by bfloat16 rounding)
# Compare held-out pass rates paired by seed and updates per seed; keep bfloat16 opt-in unless it learns as well.
# Usage, from a git archive of the commit (cd there): ARM=float32 bash run_learning_sampling_dtype.sh
set -e
ARM=${ARM:?set ARM=float32 or ARM=bfloat16}
export HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false TRL_EXPERIMENTAL_SILENCE=1
echo "commit $(cat COMMIT 2>/dev/null)"; date; lscpu | grep -E "Model name"; grep -o -w -E "avx2|avx512f|avx512_bf16|avx512_vnni|amx_bf16|fma" /proc/cpuinfo | sort -u | tr '\n' ' '; echo
/work/main/.venv/bin/python -m course_utils bench-learning --config configs/cpu_sft.yaml --sft --set sampling_dtype=$ARM \
    --seeds 0 1 2 --minutes 15 --parallel 1 --out out/sft_ppo_checker_sampling_$ARM.json
date
