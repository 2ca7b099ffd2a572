"""Issue 32: where a decode step's time goes on this host. Bench shapes: 8 prompts x 32 tokens,
LoRA r8 on q,v, 2 threads. Wall per decode step for the four switch combos = (33-token run -
1-token run) / 32, median of 3 alternated rounds; then torch.profiler's top ops by self CPU."""
import statistics, sys, tempfile, time, warnings
import torch
torch.set_num_threads(2)
warnings.filterwarnings("ignore")
from course_utils.config import PPOConfig
from course_utils.trainer import PPOTrainer
from course_utils.rollout import SamplingSettings, generate
from course_utils.comparison.bench import load_prompts
from course_utils.machinery import calibration

cfg = PPOConfig(run_name="prof", output_dir=tempfile.mkdtemp(), seed=0, device="cpu", threads=2,
                model="smollm2-135m-instruct", lora_rank=8, lora_alpha=16, lora_target_modules=["q_proj", "v_proj"],
                reward="checker_partial", batch_size=8, max_new_tokens=32, total_updates=1,
                packed_cpu_linears=False, decode_loop=False)
tr = PPOTrainer(cfg, quiet=True)
torch.set_num_threads(2)
bundle = tr.bundle
prompts, _ = load_prompts(8)
combos = {f"packed={p} loop={l}": (p, l) for p in (False, True) for l in (False, True)}
def run(p, l, n):
    generate(bundle, None, prompts, SamplingSettings(max_new_tokens=n, min_new_tokens=n, temperature=0.8), seed=0,
             packed=p, decode_loop=l)
for p, l in combos.values():
    run(p, l, 2)
res = {k: [] for k in combos}
for r in range(3):
    names = list(combos)[r:] + list(combos)[:r]
    for k in names:
        p, l = combos[k]
        t0 = time.perf_counter(); run(p, l, 1); t1 = time.perf_counter(); run(p, l, 33); t2 = time.perf_counter()
        res[k].append(((t2 - t1) - (t1 - t0)) / 32)
print("host:", calibration.host_info())
for k, v in res.items():
    print(f"{k:28s} per decode step {1000*statistics.median(v):7.2f} ms  (runs {[round(1000*x,2) for x in v]})  x32 = {32*statistics.median(v):.2f} s")
from torch.profiler import profile, ProfilerActivity
for k in (sys.argv[1:] or list(combos)):
    p, l = combos[k]
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        run(p, l, 33)
    print("\n==", k)
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=14, max_name_column_width=40))
