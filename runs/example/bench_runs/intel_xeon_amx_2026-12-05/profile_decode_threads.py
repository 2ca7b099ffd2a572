"""Issue 32, the levers the 2026-12-04 profile left unmeasured: thread settings and oneDNN's kernels.

Bench shapes (8 prompts x 32 tokens, LoRA r8 on q,v), the packed + decode-loop path that `auto` chose on
this host, float32 and bfloat16 sampling. Per decode step = (33-token run - 1-token run) / 32, median of 3
alternated rounds, for torch threads 1 and 2. Run with ONEDNN_VERBOSE=1 (a separate run) to list which
oneDNN implementation each linear layer used: `python profile_decode_threads.py --verbose`.
"""
import collections, statistics, sys, tempfile, time, warnings

import torch

warnings.filterwarnings("ignore")
from course_utils.comparison.bench import load_prompts
from course_utils.config import PPOConfig
from course_utils.machinery import calibration
from course_utils.rollout import SamplingSettings, generate
from course_utils.trainer import PPOTrainer

cfg = PPOConfig(run_name="prof", output_dir=tempfile.mkdtemp(), seed=0, device="cpu", threads=2,
                model="smollm2-135m-instruct", lora_rank=8, lora_alpha=16, lora_target_modules=["q_proj", "v_proj"],
                reward="checker_partial", batch_size=8, max_new_tokens=32, total_updates=1,
                packed_cpu_linears=False, decode_loop=False)
bundle = PPOTrainer(cfg, quiet=True).bundle
prompts, _ = load_prompts(8)


def run(n, dtype):
    generate(bundle, None, prompts, SamplingSettings(max_new_tokens=n, min_new_tokens=n, temperature=0.8), seed=0,
             packed=True, decode_loop=True, sampling_dtype=dtype)


if "--verbose" in sys.argv:  # ONEDNN_VERBOSE=1 in the environment: oneDNN prints one line per primitive run
    torch.set_num_threads(2)
    for dtype in ("float32", "bfloat16"):
        for call in ("first", "second"):  # the second rollout shows what is repeated at every rollout
            print(f"#### {dtype} {call}", flush=True)
            run(2, dtype)
    sys.exit(0)

combos = [(threads, dtype) for dtype in ("float32", "bfloat16") for threads in (1, 2)]
for threads, dtype in combos:
    torch.set_num_threads(threads)
    run(2, dtype)
res = collections.defaultdict(list)
for r in range(3):
    for threads, dtype in combos[r:] + combos[:r]:
        torch.set_num_threads(threads)
        t0 = time.perf_counter(); run(1, dtype); t1 = time.perf_counter(); run(33, dtype); t2 = time.perf_counter()
        res[(threads, dtype)].append(((t2 - t1) - (t1 - t0)) / 32)
print("host:", calibration.host_info())
print("torch", torch.__version__, "| interop threads", torch.get_num_interop_threads(), "|", torch.__config__.parallel_info().splitlines()[-6:])
for (threads, dtype), v in res.items():
    print(f"threads={threads} dtype={dtype:9s} per decode step {1000 * statistics.median(v):7.2f} ms  "
          f"(runs {[round(1000 * x, 2) for x in v]})")
