# Sourced by each design's run_seed.sh before its first stage: one timed run at a time. Other work on
# the host must not take the CPU from it. Under autogroup scheduling `nice` has no effect between
# sessions (rl_after_sft/NOTES.md, seed 1), so switch it off where we may, and run the seed at nice -10
# (its stages inherit it) so that work at nice 19 barely touches it. Then record the commit and the host.
[ -w /proc/sys/kernel/sched_autogroup_enabled ] && echo 0 > /proc/sys/kernel/sched_autogroup_enabled
renice -n -10 -p $$ >/dev/null 2>&1 || echo "note: could not raise this seed's priority (not root)"
echo "autogroup $(cat /proc/sys/kernel/sched_autogroup_enabled 2>/dev/null || echo n/a), nice $(ps -o ni= -p $$)"
echo "commit $(cat COMMIT 2>/dev/null || echo unknown)"; date -u; lscpu | grep -E "Model name"
grep -o -w -E "avx2|avx512f|avx512_bf16|avx512_vnni|amx_bf16|fma" /proc/cpuinfo | sort -u | tr '\n' ' '; echo
done_sft() { [ -f "$OUT/$1/metrics.json" ]; }
done_ppo() { [ -f "$OUT/$1/summary.json" ]; }
