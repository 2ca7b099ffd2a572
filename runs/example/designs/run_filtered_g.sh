#!/bin/bash
# Design (g), filtered SFT control: all 320 demos of the 8 demo families + the model's own passing answers to the 80
# undemonstrated train prompts (4 samples each, every 25 SFT steps), 15 training minutes (sampling included), 3 seeds.
# Ran from a git archive of commit 95b7d82 (a session branch, since lost); main has the same flags since 055ee51.
cd <a git archive of the commit>
export HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false TRL_EXPERIMENTAL_SILENCE=1
FAM="result_sum json_object comma_no_spaces yes_no_parity alphabetical_order count_words uppercase_word bracket_word"
date; lscpu | grep -E "Model name"; grep -o -w -E "avx2|avx512f|avx512_bf16|amx_bf16|fma" /proc/cpuinfo | sort -u | tr '\n' ' '; echo
/work/main/.venv/bin/python -m course_utils bench-learning --sft-full --self-samples 4 --resample-every 25 --demo-families $FAM --seeds 0 1 2 --minutes 15 --parallel 1 --out /tmp/arms_fg/sft_filtered_nodemo.json
date
