#!/bin/bash
# Design (f), noisy teacher at 0.25 (habit style): filtered SFT, the strongest non-RL control: the 400 noisy demos filtered by the checker (the ~300 correct ones kept), plus 4 self-samples per prompt without a passing demo, the passing ones added (every 25 steps), 15 training minutes; seeds 0 and 1 (session 25 had room for two before its CI run; seed 2 is run_sft_filtered_noise0.25_seed2.sh, added with assemble_designs.py --add-seeds).
cd /tmp/arm_f025f
export HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false TRL_EXPERIMENTAL_SILENCE=1
echo "commit $(cat COMMIT 2>/dev/null)"; date; lscpu | grep -E "Model name"; grep -o -w -E "avx2|avx512f|avx512_bf16|avx512_vnni|amx_bf16|fma" /proc/cpuinfo | sort -u | tr '\n' ' '; echo
/work/main/.venv/bin/python -m course_utils bench-learning --sft-full --demo-noise 0.25 --demo-noise-style habit --demo-filter --self-samples 4 --seeds 0 1 --minutes 15 --parallel 1 --out /tmp/arm_f025f/out/sft_filtered_noise0.25_seeds01.json
date
