#!/bin/bash
# Issue 32: `make bench` five consecutive times with bfloat16 sampling (`--sampling-dtype bfloat16`), on the Intel
# AMX host whose float32 rows are in ../intel_xeon_amx_2026-12-04/ (same protocol: a fresh calibration cache before
# run 1, nothing else running). Usage: from a git archive of the commit (cd there), bash this script.
export HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false TRL_EXPERIMENTAL_SILENCE=1
export COURSE_CALIBRATION_FILE=$PWD/out/fast_paths.json
mkdir -p out; rm -f $COURSE_CALIBRATION_FILE
echo "commit $(cat COMMIT 2>/dev/null)"; date; lscpu | grep -E "Model name"; grep -o -w -E "avx2|avx512f|avx512_bf16|avx512_vnni|amx_bf16|fma" /proc/cpuinfo | sort -u | tr '\n' ' '; echo
for i in 1 2 3 4 5; do
  s=$(date +%s)
  /work/main/.venv/bin/python -m course_utils bench --sampling-dtype bfloat16 --out out/run$i.json > out/run$i.log 2>&1
  echo "run $i rc=$? $(( $(date +%s) - s ))s"
done
date
