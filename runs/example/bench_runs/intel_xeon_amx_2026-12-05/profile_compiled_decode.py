"""Issue 32, the last lever the profiles left untried: a compiled decode step (torch.compile, inductor, CPU).

An upper bound first, before any change to the library: the default model without LoRA, the bench's rollout
shape (8 rows, a 32-token prompt, 32 new tokens), a StaticCache and a full-length attention mask so that every
decode step has the same shapes (the library's loop slices the mask, which would recompile every step). Per decode
step: eager against compiled, median of 5 runs of 32 steps each after warm-up, float32 and bfloat16, 2 threads;
and the compile time, which a 15-minute run pays once per process (and again per seed).

    PYTHONPATH=. .venv/bin/python runs/example/bench_runs/intel_xeon_amx_2026-12-05/profile_compiled_decode.py
"""
import statistics
import time
import warnings

import torch

warnings.filterwarnings("ignore")
from transformers import AutoModelForCausalLM, StaticCache

from course_utils.machinery import calibration, hub

torch.set_num_threads(2)
ROWS, PROMPT, STEPS, REPEATS = 8, 32, 32, 5


def decode_steps(model, forward, dtype):
    """Seconds per decode step over STEPS steps after a prefill, the shapes fixed throughout."""
    cache = StaticCache(config=model.config, max_cache_len=PROMPT + STEPS)
    ids = torch.randint(100, 20000, (ROWS, PROMPT))
    mask = torch.ones(ROWS, PROMPT + STEPS, dtype=torch.long)
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=dtype == torch.bfloat16):
        out = model(input_ids=ids, attention_mask=mask[:, :PROMPT], cache=cache, use_cache=True,
                    cache_position=torch.arange(PROMPT), logits_to_keep=1)
        token = out.logits[:, -1].argmax(-1, keepdim=True)
        start = time.perf_counter()
        for step in range(STEPS - 1):
            out = forward(input_ids=token, attention_mask=mask, cache=cache, use_cache=True,
                          cache_position=torch.tensor([PROMPT + step]))
            token = out.logits[:, -1].argmax(-1, keepdim=True)
    return (time.perf_counter() - start) / (STEPS - 1)


model = AutoModelForCausalLM.from_pretrained(hub.resolve_model(hub.DEFAULT_MODEL), torch_dtype=torch.float32).eval()
print("host:", calibration.host_info(), "| torch", torch.__version__)
for dtype in (torch.float32, torch.bfloat16):
    eager = [decode_steps(model, model, dtype) for _ in range(REPEATS + 1)][1:]
    compiled_forward = torch.compile(model, dynamic=False)
    t0 = time.perf_counter()
    decode_steps(model, compiled_forward, dtype)  # compiles here (and on the first decode step's shapes)
    compile_s = time.perf_counter() - t0
    compiled = [decode_steps(model, compiled_forward, dtype) for _ in range(REPEATS)]
    e, c = statistics.median(eager), statistics.median(compiled)
    print(f"{str(dtype):15s} eager {1000 * e:6.1f} ms/step  compiled {1000 * c:6.1f} ms/step  ({e / c:.2f}x)  "
          f"first compiled run incl. compile {compile_s:.0f} s  | eager runs {[round(1000 * x, 1) for x in eager]} "
          f"compiled runs {[round(1000 * x, 1) for x in compiled]}")
    torch._dynamo.reset()
