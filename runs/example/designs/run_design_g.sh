#!/bin/bash
# Design (g): lowercase_word and number_only have no demonstrations (chosen on the validation split: a 200-demo warm-up
# without their demos (and without bracket_word's) answered them with pass@16 = 0.3 each; bracket_word 0.0).
cd <a git archive of commit afdb2b8>
export HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false TRL_EXPERIMENTAL_SILENCE=1
FAM="result_sum json_object comma_no_spaces yes_no_parity alphabetical_order count_words uppercase_word bracket_word"
date; lscpu | grep -E "Model name"
/work/main/.venv/bin/python -m course_utils bench-learning --config configs/cpu_sft.yaml --sft --demo-families $FAM --seeds 0 1 2 --minutes 15 --parallel 1 --out /tmp/arms_g/ppo/sft_ppo_checker_nodemo.json
date
/work/main/.venv/bin/python -m course_utils bench-learning --sft-full --demo-families $FAM --seeds 0 1 2 --minutes 15 --parallel 1 --out /tmp/arms_g/full/sft_full_nodemo.json
date
