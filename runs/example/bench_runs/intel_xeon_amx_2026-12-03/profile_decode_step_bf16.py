import statistics, tempfile, time, warnings, torch
torch.set_num_threads(2); warnings.filterwarnings("ignore")
from course_utils.config import PPOConfig
from course_utils.trainer import PPOTrainer
from course_utils.rollout import SamplingSettings, generate
from course_utils.comparison.bench import load_prompts, machine_limits, _model_size
cfg = PPOConfig(run_name="prof", output_dir=tempfile.mkdtemp(), seed=0, device="cpu", threads=2,
                model="smollm2-135m-instruct", lora_rank=8, lora_alpha=16, lora_target_modules=["q_proj", "v_proj"],
                reward="checker_partial", batch_size=8, max_new_tokens=32, total_updates=1,
                packed_cpu_linears=False, decode_loop=False)
tr = PPOTrainer(cfg, quiet=True); torch.set_num_threads(2)
prompts, _ = load_prompts(8)
combos = {f"packed={p} loop=True dtype={d}": (p, d) for p, d in ((False, "float32"), (True, "float32"), (True, "bfloat16"))}
def run(p, d, n):
    generate(tr.bundle, None, prompts, SamplingSettings(max_new_tokens=n, min_new_tokens=n, temperature=0.8), seed=0,
             packed=p, decode_loop=True, sampling_dtype=d)
for p, d in combos.values(): run(p, d, 2)
res = {k: [] for k in combos}
for r in range(3):
    for k in list(combos)[r:] + list(combos)[:r]:
        p, d = combos[k]
        t0 = time.perf_counter(); run(p, d, 1); t1 = time.perf_counter(); run(p, d, 33); t2 = time.perf_counter()
        res[k].append(((t2 - t1) - (t1 - t0)) / 32)
for k, v in res.items():
    print(f"{k:40s} per decode step {1000*statistics.median(v):7.2f} ms  runs {[round(1000*x,2) for x in v]}")
lim = machine_limits(576, 1536, 8)
params, wbytes = _model_size(tr.policy)
print("limits", {k: (round(v, 1) if isinstance(v, float) else v) for k, v in lim.items()})
print(f"matmul params {params/1e6:.1f} M, weight bytes {wbytes/1e6:.0f} MB; per-step floor: read {1000*wbytes/(lim['read_gb_per_s']*2**30):.1f} ms, "
      f"compute {1000*2*params*8/(lim['matmul_gflop_per_s']*1e9):.1f} ms")
