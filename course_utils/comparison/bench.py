"""Speed and memory: our PPO trainer against TRL 1.12.0's PPOTrainer, same configuration, same run.

    python -m course_utils bench --out runs/bench.json            # both, SmolLM2-135M, 3 updates each
    python -m course_utils bench --only trl --updates 5           # one side only
    python -m course_utils.comparison.bench --model tiny-smollm2 --updates 1 --warmup 0   # seconds (also works)

The shared configuration (issue 6): SmolLM2-135M-Instruct in float32 on the CPU, LoRA rank 8
(alpha 16) on q_proj and v_proj, 8 episodes per update, 32 response tokens, 1 PPO epoch of 1
minibatch, temperature 0.8, 2 torch threads, prompts from the course's training split rendered
with the chat template (the same pool; each trainer shuffles it its own way).

Each trainer runs in its OWN child process (``python -m course_utils.comparison.bench --child ours|trl``), one
after the other, so their peak memories are separate and they never compete for the cores. A child
loads its models, runs ``warmup`` updates that are not counted, then ``updates`` timed updates,
and reports:

    s_per_update      median wall time of the timed updates
    episodes_per_s    batch_size / s_per_update
    peak_rss_gb       the process's peak resident memory over its whole life (getrusage ru_maxrss,
                      which includes loading the models); GB = 10^9 bytes
    peak_rss_updates_gb  peak resident memory sampled every 10 ms during the updates only (ours:
                      with its building blocks, timed between the updates)
    phases            median seconds per phase of an update

For our trainer the child also times the building blocks of an update ALONE, each right after
every timed update (so both see the same machine conditions), median over the updates: generating 8 x 32 tokens, the frozen forwards (policy without gradients
for the old log-probs and values, then the reference = adapter disabled), and one training
forward + backward of the PPO loss on the batch. ``ratios.update_over_building_blocks`` is our
update time over their sum: how much the loop adds around the unavoidable work (target <= 1.2).

What each side computes differs where the two designs differ, and the JSON says so:

- reward: TRL's PPOTrainer needs a reward *model*; it gets a sequence-classification head
  (random, num_labels=1) on the same SmolLM2 backbone, i.e. one more 135M forward per update.
  Ours scores with the task checker (a Python function; no model).
- value: TRL's value model is a separate, fully trainable copy of the backbone (135M parameters
  in Adam); ours is a linear value head on the policy's shared, LoRA-adapted backbone.
- EOS: TRL (``stop_token=None``, its default) never stops early: every response is exactly
  ``response_length`` tokens. Ours normally stops a sequence at its first EOS; for the benchmark
  it bans EOS until ``response_length`` (``full_length``, default on), so both generate and train
  on the same number of tokens. ``--natural-eos`` lets ours stop at EOS. The JSON records the
  response tokens per update of both.
- padding: SmolLM2's pad token is its EOS ``<|im_end|>``, which also ends every chat turn inside
  the prompts. TRL builds attention masks as ``ids != pad_token_id``, so it would mask those
  prompt tokens; we give TRL ``<|endoftext|>`` (id 0, never in a chat prompt) as its pad token.
- TRL's defaults we override for the same configuration: bf16 -> False (fp32), temperature 0.7 ->
  0.8, num_ppo_epochs 4 -> 1, learning_rate 3e-6 -> ours, kl_coef 0.05 -> ours,
  gradient_checkpointing -> False (the PPOTrainer never enables it anyway),
  num_sample_generations 10 -> 0 (no sample printing), report_to -> none, no saving or eval.

Compatibility: TRL 1.12.0's experimental PPOTrainer runs with transformers 5.24.0 (the pinned
version) without any patch; the only messages are deprecation warnings
(``gradient_checkpointing`` renamed, ``generation_config`` passed with extra generation arguments).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import statistics
import sys
import tempfile
import threading
import time
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path

from course_utils.comparison import child
from course_utils.machinery import calibration, safe_files
from course_utils.machinery.versions import package_versions

GB = 1e9
TYPICAL_PROMPT_TOKENS = 64
"""Prompt length assumed for the matmul shape of ``machine_limits`` (the course's chat prompts
are 50-70 tokens); the bound itself uses the measured prompt length."""
SWITCH_VALUES = {"auto": "auto", "true": True, "false": False}
"""--packed and --decode-loop: the word on the command line -> the PPOConfig value."""
TARGETS = {
    "episodes_per_s_ours_over_trl_min": 3.0,
    "peak_rss_ours_over_trl_max": 0.5,
    "update_over_building_blocks_max": 1.2,
    "update_over_lower_bound_max": 1.3,
    "generation_over_lower_bound_max": 2.0,
}


@dataclass
class BenchConfig:
    """The configuration both trainers run (issue 6), plus how long to measure."""

    model: str = "smollm2-135m-instruct"
    """Model name for ``hub.resolve_model`` (the smoke test uses "tiny-smollm2")."""
    batch_size: int = 8
    """Episodes per PPO update."""
    response_length: int = 32
    """Response tokens: TRL's ``response_length``, our ``max_new_tokens``."""
    lora_rank: int = 8
    lora_alpha: int = 16
    lora_target_modules: list = field(default_factory=lambda: ["q_proj", "v_proj"])
    ppo_epochs: int = 1
    num_minibatches: int = 1
    temperature: float = 0.8
    learning_rate: float = 2e-4
    kl_coef: float = 0.02
    threads: int = 2
    """torch intra-op threads in each child (``torch.set_num_threads``, OMP_NUM_THREADS)."""
    updates: int = 3
    """Timed updates per trainer; s_per_update is their median."""
    warmup: int = 1
    """Updates run first and not counted (allocator and kernel warm-up)."""
    seed: int = 0
    num_prompts: int = 64
    """Distinct training prompts given to each trainer."""
    old_logprobs_from: str = "generation"
    """Ours only: where the rollout's old log-probs and values come from (``PPOConfig`` field of
    the same name). "generation" (what the cpu preset uses) reads them from the sampler's own
    logits and hidden states, one forward pass fewer; "forward" is the textbook separate pass.
    TRL always does the separate pass."""
    full_length: bool = True
    """Ban EOS in our rollouts until response_length, so both trainers generate the same number
    of tokens (TRL never stops early). False: ours stops at EOS, TRL still does not."""
    packed_cpu_linears: bool | str = "auto"
    """Ours only: the ``PPOConfig`` field of the same name (oneDNN-packed weights for sampling and
    the frozen forwards): "auto" as a run chooses it (measured on this machine, cached; the choice
    and its times are in ``ours.fast_paths``); ``--no-packed`` measures PyTorch's default kernels,
    ``--packed true`` the packed ones."""
    decode_loop: bool | str = "auto"
    """Ours only: the ``PPOConfig`` field of the same name (the library's sampling loop rather than
    transformers' ``generate``), chosen like ``packed_cpu_linears``; ``--no-decode-loop`` measures
    ``generate``, ``--decode-loop true`` the loop."""
    sampling_dtype: str = "float32"
    """Ours only: the ``PPOConfig`` field of the same name; ``--sampling-dtype bfloat16`` measures
    the opt-in bfloat16 sampler, and ``sampler_logprob_error`` says how far its log-probs are from
    the float32 forward."""


# ---------------------------------------------------------------------------------------------
# Helpers shared by both children
# ---------------------------------------------------------------------------------------------


def ru_maxrss_gb() -> float:
    """Peak resident set size of this process so far, in GB (getrusage: KiB on Linux, bytes on macOS)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / GB if sys.platform == "darwin" else peak * 1024 / GB


def current_rss_gb() -> float:
    try:
        import psutil

        return psutil.Process().memory_info().rss / GB
    except ImportError:  # Linux without psutil: resident pages from /proc
        pages = int(Path("/proc/self/statm").read_text().split()[1])
        return pages * os.sysconf("SC_PAGE_SIZE") / GB


class PeakRSSSampler:
    """Samples this process's RSS every ``interval`` seconds in a background thread and keeps the
    maximum: the peak *during* a block, which ru_maxrss (a whole-life peak) cannot give."""

    def __init__(self, interval: float = 0.01):
        self.interval, self.peak = interval, 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, current_rss_gb())
            self._stop.wait(self.interval)

    def __enter__(self) -> "PeakRSSSampler":
        self.peak = current_rss_gb()
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, current_rss_gb())


def _load_average() -> list[float] | None:
    """1, 5 and 15-minute load averages: above the core count, other processes competed for the
    cores and every wall time here is inflated."""
    return [round(x, 2) for x in os.getloadavg()] if hasattr(os, "getloadavg") else None


def median(xs: list[float]) -> float:
    return float(statistics.median(xs)) if xs else float("nan")


def median_phases(per_update: list[dict]) -> dict:
    """Median over updates of each phase's seconds (a phase missing from an update counts as 0)."""
    keys = sorted({k for d in per_update for k in d})
    return {k: median([d.get(k, 0.0) for d in per_update]) for k in keys}


def load_prompts(n: int) -> tuple[list[str], str]:
    """The first ``n`` user prompts of the course's training split (the pool our trainer draws
    from, cycled when ``n`` is larger), and where they came from."""
    from course_utils import tasks

    prompts = [r.prompt for r in tasks.load_split("train")]
    return [prompts[i % len(prompts)] for i in range(n)], "course_utils.tasks.load_split('train')"


def set_threads(n: int) -> None:
    import torch

    torch.set_num_threads(n)


# ---------------------------------------------------------------------------------------------
# Child: TRL 1.12.0's PPOTrainer
# ---------------------------------------------------------------------------------------------


class _PhaseClock:
    """Accumulates seconds per phase name; ``take()`` returns them and starts afresh."""

    def __init__(self):
        self.seconds: dict[str, float] = {}

    def add(self, name: str, seconds: float) -> None:
        self.seconds[name] = self.seconds.get(name, 0.0) + seconds

    def take(self) -> dict:
        out, self.seconds = self.seconds, {}
        return out

    def wrap(self, name_of, fn):
        """``fn`` timed under the phase ``name_of(*args, **kwargs)`` (a str, or a function of the call)."""

        def timed(*args, **kwargs):
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                name = name_of(*args, **kwargs) if callable(name_of) else name_of
                self.add(name, time.perf_counter() - start)

        return timed


def run_trl(cfg: BenchConfig) -> dict:
    """Load TRL's four models, run warmup + updates PPO updates, return the measurements.

    Per-update wall times come from a TrainerCallback (``on_step_end`` fires once per PPO update,
    after the optimizer step and logging). Phase times come from timing wrappers put around the
    functions ``PPOTrainer.train`` calls by their module-level names (no change to what they do):
    ``batch_generation`` (sampling), ``forward`` (the reference forward without gradients; the
    training forward with them), ``get_reward`` (value-model and reward-model forwards), and
    ``accelerator.backward``. ``other`` is the rest: GAE, whitening, optimizer step, logging, gc.
    """
    set_threads(cfg.threads)
    rss_at_start = current_rss_gb()
    import torch
    from datasets import Dataset
    from transformers import TrainerCallback

    from course_utils.comparison import trl_adapter as ta
    from course_utils.machinery import hub

    trl = ta.require_trl()
    rss_after_imports = current_rss_gb()
    torch.manual_seed(cfg.seed)
    folder = hub.resolve_model(cfg.model)
    tokenizer = ta.trl_tokenizer(folder)
    prompts, prompt_source = load_prompts(max(cfg.num_prompts, cfg.batch_size))
    dataset = Dataset.from_dict({"input_ids": ta.trl_prompt_ids(tokenizer, prompts)})
    policy, value_model, reward_model = ta.load_trl_models(folder, tokenizer)

    def make_args(workdir):
        return ta.trl_ppo_args(
            workdir, seed=cfg.seed, batch_size=cfg.batch_size, num_minibatches=cfg.num_minibatches,
            ppo_epochs=cfg.ppo_epochs, total_updates=cfg.warmup + cfg.updates, response_length=cfg.response_length,
            temperature=cfg.temperature, learning_rate=cfg.learning_rate, kl_coef=cfg.kl_coef,
            stop_token=None,  # TRL's default: no early stop, every response has response_length tokens
        )

    clock = _PhaseClock()
    responses_seen: list[dict] = []

    def timed_generation(original):
        def generation(*a, **kw):
            start = time.perf_counter()
            query_responses, logits = original(*a, **kw)
            clock.add("generation", time.perf_counter() - start)
            queries = kw.get("queries", a[1] if len(a) > 1 else None)
            response = query_responses[:, queries.shape[1]:]
            responses_seen.append({"tokens": int(response.numel()),
                                   "with_eos": int((response == tokenizer.eos_token_id).any(1).sum())})
            return query_responses, logits
        return generation

    wrappers = {
        "batch_generation": timed_generation,
        "forward": lambda original: clock.wrap(
            lambda *a, **k: "train_forward" if torch.is_grad_enabled() else "ref_forward", original),
        "get_reward": lambda original: clock.wrap("value_and_reward_forwards", original),
    }

    stamps: list[float] = []
    cpu_stamps: list[float] = []
    phases: list[dict] = []
    trl_logs: list[dict] = []

    class Timer(TrainerCallback):
        def on_train_begin(self, args, state, control, **kwargs):
            clock.take()
            stamps.append(time.perf_counter())
            cpu_stamps.append(time.process_time())

        def on_step_end(self, args, state, control, **kwargs):
            stamps.append(time.perf_counter())
            cpu_stamps.append(time.process_time())
            phases.append(clock.take())

        def on_log(self, args, state, control, logs=None, **kwargs):
            if logs:
                trl_logs.append({k: v for k, v in logs.items() if isinstance(v, (int, float))})

    sampler = PeakRSSSampler()
    setup: dict = {}

    def before_train(trainer):
        trainer.accelerator.backward = clock.wrap("backward", trainer.accelerator.backward)
        setup["rss_gb"] = current_rss_gb()
        setup["trainable"] = sum(p.numel() for p in trainer.model.parameters() if p.requires_grad)
        sampler.__enter__()  # peak memory of the updates only
        return sampler.__exit__

    ta.train_trl(make_args, tokenizer=tokenizer, policy=policy, value_model=value_model, reward_model=reward_model,
                 dataset=dataset, lora=ta.trl_lora_config(cfg.lora_rank, cfg.lora_alpha, cfg.lora_target_modules),
                 callbacks=[Timer()], wrappers=wrappers, before_train=before_train)
    rss_after_setup, trainable = setup["rss_gb"], setup["trainable"]

    walls = [b - a for a, b in zip(stamps, stamps[1:])]
    cpu = [b - a for a, b in zip(cpu_stamps, cpu_stamps[1:])][cfg.warmup:]
    timed = walls[cfg.warmup:]
    timed_phases = phases[cfg.warmup:]
    for wall, ph in zip(timed, timed_phases):
        ph["other"] = wall - sum(ph.values())
    s_per_update = median(timed)
    return {
        "trainer": f"trl.experimental.ppo.PPOTrainer (trl {trl.__version__})",
        "s_per_update": s_per_update,
        "episodes_per_s": cfg.batch_size / s_per_update,
        "peak_rss_gb": ru_maxrss_gb(),
        "peak_rss_updates_gb": sampler.peak,
        "rss_at_start_gb": rss_at_start,
        "rss_after_imports_gb": rss_after_imports,
        "rss_after_setup_gb": rss_after_setup,
        "update_times_s": timed,
        "warmup_times_s": walls[:cfg.warmup],
        "cpu_s_per_update": median(cpu),
        "load_average": _load_average(),
        "phases": median_phases(timed_phases),
        "phase_notes": {
            "generation": "batch_generation: sampling response_length tokens (policy, LoRA unmerged)",
            "ref_forward": "forward() without gradients: the reference (adapter disabled)",
            "value_and_reward_forwards": "get_reward(): value model and reward model forwards, no gradients",
            "train_forward": "forward() with gradients: policy + value model (two backbones)",
            "backward": "accelerator.backward(loss)",
            "other": "the rest: log-prob gathering, GAE, whitening, optimizer step, logging, gc",
        },
        "response_tokens_per_update": median([r["tokens"] for r in responses_seen[cfg.warmup:]]),
        "responses_with_eos_per_update": median([r["with_eos"] for r in responses_seen[cfg.warmup:]]),
        "trainable_parameters": int(trainable),
        "computes": {
            "policy": f"LoRA r{cfg.lora_rank} alpha {cfg.lora_alpha} on {cfg.lora_target_modules} (peft)",
            "reference": "the policy with its adapter disabled (ref_model=None with peft)",
            "value": "separate AutoModelForSequenceClassification (full copy of the backbone, all weights trained)",
            "reward": "AutoModelForSequenceClassification on the same backbone, num_labels=1, random head "
                      "(one extra 135M forward per update; a stand-in for a trained reward model)",
            "eos": "stop_token=None: no early stop; every response is exactly response_length tokens",
            "pad_token": f"{tokenizer.pad_token!r} (id {tokenizer.pad_token_id}); <|im_end|> would mask prompt tokens",
            "gradient_checkpointing": False,
        },
        "prompt_source": prompt_source,
        "last_log": trl_logs[-1] if trl_logs else {},
    }


# ---------------------------------------------------------------------------------------------
# Child: our trainer
# ---------------------------------------------------------------------------------------------


def _seconds(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def machine_limits(hidden: int, intermediate: int, rows: int, repeats: int = 5) -> dict:
    """Two numbers this machine reaches, measured here with the child's threads (median of
    ``repeats``): memory read bandwidth (the sum of a 512 MB float32 tensor, GB/s) and float32
    matmul throughput at the model's own shape (``[rows, hidden] x [hidden, intermediate]``, the
    MLP's up-projection over a rollout batch, GFLOP/s), the faster of PyTorch's default kernel and
    the oneDNN-packed one (``machinery.packed_linear``), so that the bound holds for both."""
    import torch

    from course_utils.machinery.packed_linear import packed_linears

    big = torch.ones(128 * 1024 * 1024)  # 512 MB: far larger than any cache
    x, layer = torch.randn(rows, hidden), torch.nn.Linear(hidden, intermediate, bias=False)
    holder = torch.nn.Sequential(layer)
    flop = 2 * rows * hidden * intermediate

    def gflops(module) -> float:
        with torch.no_grad():
            module(x)  # warm-up
            return flop / median([_seconds(lambda: module(x)) for _ in range(repeats)]) / 1e9

    big.sum()
    read = median([_seconds(lambda: big.sum()) for _ in range(repeats)])
    default = gflops(holder)
    with torch.no_grad(), packed_linears(holder) as swapped:
        packed = gflops(holder) if swapped else 0.0
    return {"read_gb_per_s": big.numel() * 4 / read / GB, "matmul_gflop_per_s": max(default, packed),
            "matmul_gflop_per_s_default": default, "matmul_gflop_per_s_packed": packed,
            "matmul_shape": [rows, hidden, intermediate]}


def lower_bound(limits: dict, *, matmul_params: int, weight_bytes: int, batch: int, prompt_tokens: int,
                response_tokens: int, epochs: int, old_logprobs_from: str) -> dict:
    """The least time each phase of an update can take on this machine (issue 17), in seconds.

    generation: the prompt's prefill (2 · P · B · L_prompt FLOPs) plus, per new token, the larger
        of reading every weight once (``weight_bytes`` / bandwidth) and 2 · P · B FLOPs;
    frozen forwards: 2 · P · B · (L_prompt + L_response) FLOPs each (the reference; also the
        old-policy forward when old_logprobs_from="forward");
    training: per epoch one forward and a backward of about one more forward (LoRA: no weight
        gradients of the frozen matrices).
    P = parameters inside matmuls (every linear layer, the LM head included). Attention scores,
    norms and the optimizer are left out: this is a floor, not a prediction.
    """
    flops = limits["matmul_gflop_per_s"] * 1e9
    read = limits["read_gb_per_s"] * GB
    full = 2 * matmul_params * batch * (prompt_tokens + response_tokens) / flops
    step = max(weight_bytes / read, 2 * matmul_params * batch / flops)
    bound = {
        "generation_s": 2 * matmul_params * batch * prompt_tokens / flops + response_tokens * step,
        "frozen_forwards_s": full * (1 if old_logprobs_from == "generation" else 2),
        "train_forward_backward_s": epochs * 2 * full,
    }
    bound["update_s"] = sum(bound.values())
    return bound


def _model_size(policy) -> tuple[int, int]:
    """(parameters inside linear layers, their bytes): what every decode step must read."""
    import torch

    linears = [m for m in policy.base_model.modules() if isinstance(m, torch.nn.Linear)]
    params = sum(m.weight.numel() for m in linears)
    return params, sum(m.weight.numel() * m.weight.element_size() for m in linears)


def building_blocks(trainer) -> tuple[dict, int, int, dict]:
    """The building blocks of one update, as functions to time alone, on one batch of training
    prompts: generation; the frozen forwards (policy without gradients for the old log-probs and
    values, then the reference = adapter disabled); one training forward + backward of the PPO
    loss (clipped policy loss + value loss - entropy). Returns them, the batch's response tokens,
    its prompt length (left-padded columns) and ``sampler_logprob_error`` on it.
    """
    import torch

    from course_utils import update as ppo
    from course_utils.machinery.packed_linear import packed_linears
    from course_utils.rollout import generate, sequence_forward

    bundle, policy, config = trainer.bundle, trainer.policy, trainer.config
    batch = trainer.prepare_batch()  # a real rollout batch: the one the next timed update would draw
    prompts, rollout = [r.prompt for r in batch.records], batch.rollout
    sampling = trainer.sampling()
    q_ids, q_mask, r_ids, mask = rollout.query_ids, rollout.query_mask, rollout.response_ids, rollout.response_mask

    from_generation = config.old_logprobs_from == "generation"

    def generation():  # with the sampler's log-probs and values kept, when the update uses them
        generate(bundle, None, prompts, sampling, keep_generation_logprobs=from_generation,
                 keep_generation_values=from_generation, packed=config.packed_cpu_linears,
                 decode_loop=config.decode_loop, sampling_dtype=config.sampling_dtype)

    def frozen_forwards():  # as collect_rollout does them
        policy.eval()
        with torch.no_grad(), packed_linears(policy, config.packed_cpu_linears):
            if not from_generation:  # otherwise the old log-probs and values came with the sample
                sequence_forward(policy, q_ids, q_mask, r_ids, mask, config.temperature)
            with bundle.reference_model() as reference, packed_linears(reference, config.packed_cpu_linears):
                sequence_forward(reference, q_ids, q_mask, r_ids, mask, config.temperature)

    def train_forward_backward():  # the update's own minibatch loss, forward and backward
        policy.train()
        with packed_linears(policy, config.packed_cpu_linears):
            loss, _ = ppo.minibatch_loss(policy, batch, config)
            loss.backward()
        trainer.optimizer.zero_grad(set_to_none=True)

    blocks = {"generation_s": generation, "frozen_forwards_s": frozen_forwards,
              "train_forward_backward_s": train_forward_backward}
    return blocks, int(mask.sum()), int(q_ids.shape[1]), sampler_logprob_error(trainer, batch)


def sampler_logprob_error(trainer, batch) -> dict:
    """How far the sampler's log-probs of its own tokens are from a float32 forward's (the dense
    kernels, the training computation) on a fresh sample for the batch's prompts (nats over real
    tokens): ``mean_abs``, ``max_abs`` and ``mean`` (sampler minus forward, the k1 estimate of
    KL(sampler || π_old)). ~1e-5 in float32; the price of ``sampling_dtype=bfloat16``. Seeded,
    so the global random state is left alone."""
    import torch

    from course_utils.rollout import generate, sequence_forward

    policy, config = trainer.policy, trainer.config
    prompts = [r.prompt for r in batch.records]
    with torch.no_grad():
        r = generate(trainer.bundle, None, prompts, trainer.sampling(), seed=trainer.config.seed,
                     keep_generation_logprobs=True,
                     packed=config.packed_cpu_linears, decode_loop=config.decode_loop,
                     sampling_dtype=config.sampling_dtype)
        policy.eval()
        forward, _, _ = sequence_forward(policy, r.query_ids, r.query_mask, r.response_ids, r.response_mask,
                                         config.temperature)
    m = r.response_mask.bool()
    diff = (r.generation_logprobs - forward)[m]
    return {"mean_abs": float(diff.abs().mean()), "max_abs": float(diff.abs().max()), "mean": float(diff.mean()),
            "tokens": int(m.sum()), "sampling_dtype": config.sampling_dtype}


def run_ours(cfg: BenchConfig) -> dict:
    """Build our PPOTrainer on the same configuration, run warmup + updates ``ppo_update()`` calls,
    then time the building blocks of an update alone on one batch of the same prompts.

    With ``cfg.full_length`` (the default) EOS is banned until ``response_length`` tokens
    (``SamplingSettings.min_new_tokens``), so every response has exactly as many tokens as TRL's,
    which never stops early: both sides then generate and train on the same number of tokens.
    Banning EOS makes the sampler slightly off-policy; for a stopwatch that does not matter.
    """
    set_threads(cfg.threads)
    rss_at_start = current_rss_gb()
    from course_utils.config import PPOConfig
    from course_utils.trainer import PPOTrainer

    rss_after_imports = current_rss_gb()
    # The machine's two limits, measured first: before the model is loaded, so that the 512 MB
    # test tensor cannot raise the peak memory reported for the trainer.
    from transformers import AutoConfig

    from course_utils.machinery import hub

    model_config = AutoConfig.from_pretrained(hub.resolve_model(cfg.model))
    limits = machine_limits(model_config.hidden_size, model_config.intermediate_size,
                            cfg.batch_size * (cfg.response_length + TYPICAL_PROMPT_TOKENS))
    warnings.filterwarnings("ignore", message=".*min_new_tokens.*")  # the off-policy note above
    workdir = tempfile.mkdtemp(prefix="ours-bench-")
    config = PPOConfig(
        run_name="bench", output_dir=workdir, seed=cfg.seed, device="cpu", threads=cfg.threads,
        model=cfg.model, lora_rank=cfg.lora_rank, lora_alpha=cfg.lora_alpha,
        lora_target_modules=list(cfg.lora_target_modules), reward="checker_partial",
        batch_size=cfg.batch_size, max_new_tokens=cfg.response_length, temperature=cfg.temperature,
        total_updates=cfg.warmup + cfg.updates, ppo_epochs=cfg.ppo_epochs,
        num_minibatches=cfg.num_minibatches, learning_rate=cfg.learning_rate, kl_coef=cfg.kl_coef,
        old_logprobs_from=cfg.old_logprobs_from, packed_cpu_linears=cfg.packed_cpu_linears,
        decode_loop=cfg.decode_loop, sampling_dtype=cfg.sampling_dtype,
    )
    trainer = PPOTrainer(config, quiet=True)
    set_threads(cfg.threads)
    if cfg.full_length:
        trainer_sampling = trainer.sampling

        def full_length_sampling(greedy: bool = False):
            settings = trainer_sampling(greedy)
            settings.min_new_tokens = settings.max_new_tokens
            return settings

        trainer.sampling = full_length_sampling
    rss_after_setup = current_rss_gb()
    trainable = sum(p.numel() for p in trainer.params)

    block_fns, block_tokens, prompt_tokens, logprob_error = building_blocks(trainer)
    block_times: dict[str, list[float]] = {name: [] for name in block_fns}
    walls, cpu, metrics = [], [], []
    with PeakRSSSampler() as sampler:
        for i in range(cfg.warmup + cfg.updates):
            start, start_cpu = time.perf_counter(), time.process_time()
            metrics.append(trainer.ppo_update())
            walls.append(time.perf_counter() - start)
            cpu.append(time.process_time() - start_cpu)
            if i >= cfg.warmup:  # each block alone right after a timed update: same machine conditions
                for name, fn in block_fns.items():
                    block_times[name].append(_seconds(fn))
    blocks = {name: median(times) for name, times in block_times.items()}
    blocks["sum_s"] = sum(blocks.values())
    params, weight_bytes = _model_size(trainer.policy)
    sizes = dict(matmul_params=params, weight_bytes=weight_bytes, batch=cfg.batch_size, prompt_tokens=prompt_tokens,
                 response_tokens=cfg.response_length, epochs=cfg.ppo_epochs, old_logprobs_from=cfg.old_logprobs_from)
    bound = lower_bound(limits, **sizes)
    # The same floor with PyTorch's default matmul kernel only (the issue's "dense matmul"; the
    # packed kernel is 1.5-2.5x faster here, which halves the compute-bound phases' floors).
    bound_default = lower_bound({**limits, "matmul_gflop_per_s": limits["matmul_gflop_per_s_default"]}, **sizes)

    def over(floor: dict) -> dict:
        return {"generation": blocks["generation_s"] / floor["generation_s"],
                "frozen_forwards": blocks["frozen_forwards_s"] / floor["frozen_forwards_s"],
                "train_forward_backward": blocks["train_forward_backward_s"] / floor["train_forward_backward_s"],
                "update": median(walls[cfg.warmup:]) / floor["update_s"]}
    shutil.rmtree(workdir, ignore_errors=True)
    timed, timed_metrics = walls[cfg.warmup:], metrics[cfg.warmup:]
    # time_rollout_s contains the generate/forward/decode phases; report the finer ones.
    coarse = {"time_update_s", "time_rollout_s", "time_total_s"}
    phases = [{key[len("time_"):].removesuffix("_s"): float(value) for key, value in m.items()
               if key.startswith("time_") and key not in coarse} for m in timed_metrics]
    s_per_update = median(timed)
    return {
        "trainer": "course_utils.trainer.PPOTrainer.ppo_update",
        "s_per_update": s_per_update,
        "episodes_per_s": cfg.batch_size / s_per_update,
        "peak_rss_gb": ru_maxrss_gb(),
        "peak_rss_updates_gb": sampler.peak,
        "rss_at_start_gb": rss_at_start,
        "rss_after_imports_gb": rss_after_imports,
        "rss_after_setup_gb": rss_after_setup,
        "update_times_s": timed,
        "warmup_times_s": walls[:cfg.warmup],
        "cpu_s_per_update": median(cpu[cfg.warmup:]),
        "load_average": _load_average(),
        "trainer_time_update_s": [m["time_update_s"] for m in timed_metrics],
        "phases": median_phases(phases),
        "building_blocks": blocks,
        "sampler_logprob_error": logprob_error,
        "machine_limits": limits,
        "lower_bound_s": bound,
        "lower_bound_inputs": {"matmul_parameters": params, "weight_bytes": weight_bytes,
                               "prompt_tokens": prompt_tokens, "response_tokens": cfg.response_length},
        "over_lower_bound": over(bound),
        "lower_bound_default_kernel_s": bound_default,
        "over_lower_bound_default_kernel": over(bound_default),
        "building_blocks_notes": {
            "generation_s": f"rollout.generate (LoRA merged unless packed): {cfg.batch_size} prompts, "
                            f"{block_tokens} response tokens",
            "frozen_forwards_s": ("sequence_forward without gradients: the reference (adapter disabled); the old "
                                  "log-probs and values come with the sample (old_logprobs_from=generation)"
                                  if cfg.old_logprobs_from == "generation" else
                                  "sequence_forward without gradients: policy (old log-probs and values), "
                                  "then the reference (adapter disabled)"),
            "train_forward_backward_s": "sequence_forward + clipped policy loss + value loss + entropy, backward",
        },
        "response_tokens_per_update": median([m["response_length"] * cfg.batch_size for m in timed_metrics]),
        "responses_with_eos_per_update": median([m["eos_rate"] * cfg.batch_size for m in timed_metrics]),
        "trainable_parameters": int(trainable),
        "computes": {
            "policy": f"LoRA r{cfg.lora_rank} alpha {cfg.lora_alpha} on {cfg.lora_target_modules} (peft), "
                      + ("merged into the weights while generating" if not trainer.config.packed_cpu_linears
                         else "kept beside the packed base weights while generating (not merged)"),
            "reference": "the policy with its adapter disabled",
            "value": "linear value head on the policy's shared backbone (one forward gives logits and values)",
            "reward": "task checker, partial credit (Python on the decoded text; no model forward)",
            "eos": ("EOS banned until response_length (min_new_tokens), so every response is full length "
                    "like TRL's" if cfg.full_length else
                    "a response stops at its first EOS; generation stops when every response has"),
        },
        "prompt_source": "course_utils.tasks.load_split('train') through trainer.PromptStream",
        "fast_paths": trainer.fast_paths,
    }


# ---------------------------------------------------------------------------------------------
# Parent: run both children, compare, write JSON
# ---------------------------------------------------------------------------------------------


def machine_info() -> dict:
    """The host, so a learner can tell which row of the README's table is theirs: the CPU model and
    the instruction-set flags that decide which kernels pay (``calibration.host_info``)."""
    host = calibration.host_info()
    info = {
        "platform": platform.platform(),
        "python": platform.python_version(),
        "processor": platform.processor() or platform.machine(),
        "cpu_count": os.cpu_count(),
        "cpu_model": host["cpu_model"],
        "cpu_flags": host["flags"],
    }
    try:
        import psutil

        info["memory_total_gb"] = psutil.virtual_memory().total / GB
    except ImportError:
        pass
    info["load_average_before"] = _load_average()
    return info


def run_child(side: str, cfg: BenchConfig, workdir: Path, timeout: float | None = None) -> dict:
    """Run one trainer in a fresh interpreter; return its result dict, or {"error": ...}."""
    result_path = workdir / f"{side}.json"
    log_path = workdir / f"{side}.log"
    command = child.python_command("course_utils.comparison.bench", "--child", side, "--child-config",
                                   json.dumps(asdict(cfg)), "--child-result", result_path)
    code, elapsed = child.run_child(command, log_path, threads=cfg.threads, timeout=timeout)
    if code == 0 and result_path.is_file():
        result = json.loads(result_path.read_text())
        result["child_wall_s"] = elapsed
        return result
    return {"error": f"the {side} child exited with {code} after {elapsed:.0f} s", "log_tail": child.log_tail(log_path)}


def compare(ours: dict, trl: dict) -> dict:
    """The three ratios of issue 6 and whether each meets its target (None when a side is missing)."""
    ratios: dict = {"episodes_per_s_ours_over_trl": None, "peak_rss_ours_over_trl": None,
                    "update_over_building_blocks": None}
    if "s_per_update" in ours and "s_per_update" in trl:
        ratios["episodes_per_s_ours_over_trl"] = ours["episodes_per_s"] / trl["episodes_per_s"]
        ratios["peak_rss_ours_over_trl"] = ours["peak_rss_gb"] / trl["peak_rss_gb"]
        ratios["peak_rss_updates_ours_over_trl"] = ours["peak_rss_updates_gb"] / trl["peak_rss_updates_gb"]
    if "building_blocks" in ours:
        ratios["update_over_building_blocks"] = ours["s_per_update"] / ours["building_blocks"]["sum_s"]
    over = ours.get("over_lower_bound", {})
    ratios["update_over_lower_bound"] = over.get("update")
    ratios["generation_over_lower_bound"] = over.get("generation")

    def check(value, bound, at_least):
        return None if value is None else bool(value >= bound if at_least else value <= bound)

    ratios["meets_targets"] = {
        "episodes_per_s": check(ratios["episodes_per_s_ours_over_trl"], TARGETS["episodes_per_s_ours_over_trl_min"], True),
        "peak_rss": check(ratios["peak_rss_ours_over_trl"], TARGETS["peak_rss_ours_over_trl_max"], False),
        "update_over_building_blocks": check(ratios["update_over_building_blocks"],
                                             TARGETS["update_over_building_blocks_max"], False),
        "update_over_lower_bound": check(ratios["update_over_lower_bound"], TARGETS["update_over_lower_bound_max"], False),
        "generation_over_lower_bound": check(ratios["generation_over_lower_bound"],
                                             TARGETS["generation_over_lower_bound_max"], False),
    }
    ratios["targets"] = dict(TARGETS)
    return ratios


def _fmt(value, spec: str, missing: str = "-") -> str:
    return missing if value is None else format(value, spec)


def summary_text(report: dict) -> str:
    """One screen of text: the two trainers side by side, the phases, the ratios."""
    cfg, ours, trl, ratios = report["config"], report["ours"], report["trl"], report["ratios"]
    lines = [
        f"PPO speed/memory: {cfg['model']}, fp32, LoRA r{cfg['lora_rank']} on {','.join(cfg['lora_target_modules'])}, "
        f"batch {cfg['batch_size']}, {cfg['response_length']} response tokens, {cfg['ppo_epochs']} epoch x "
        f"{cfg['num_minibatches']} minibatch, {cfg['threads']} threads, median of {cfg['updates']} updates "
        f"(+{cfg['warmup']} warm-up); "
        + ("both generate full-length responses (ours with EOS banned)" if cfg.get("full_length", True)
           else "ours stops at EOS, TRL never does"),
        "",
        f"{'':28}{'ours':>12}{'TRL 1.12.0':>14}",
    ]
    rows = [("s per update", "s_per_update", ".2f"), ("episodes per s", "episodes_per_s", ".2f"),
            ("CPU s per update", "cpu_s_per_update", ".2f"),
            ("peak RSS, whole run (GB)", "peak_rss_gb", ".2f"), ("peak RSS, updates (GB)", "peak_rss_updates_gb", ".2f"),
            ("RSS after loading (GB)", "rss_after_setup_gb", ".2f"),
            ("response tokens / update", "response_tokens_per_update", ".0f"),
            ("trainable parameters", "trainable_parameters", ",")]
    for label, key, spec in rows:
        lines.append(f"{label:28}{_fmt(ours.get(key), spec):>12}{_fmt(trl.get(key), spec):>14}")
    for side, result in (("ours", ours), ("TRL", trl)):
        if "error" in result:
            lines += ["", f"{side} FAILED: {result['error']}", *("  " + t for t in result.get("log_tail", [])[-8:])]
        elif result.get("phases"):
            lines.append(f"{side} phases (s): " + ", ".join(f"{k} {v:.2f}" for k, v in result["phases"].items()))
    if "building_blocks" in ours:
        b = ours["building_blocks"]
        lines.append(f"ours alone (s): generation {b['generation_s']:.2f} + frozen forwards "
                     f"{b['frozen_forwards_s']:.2f} + train fwd+bwd {b['train_forward_backward_s']:.2f} "
                     f"= {b['sum_s']:.2f}")
    if "sampler_logprob_error" in ours:
        e = ours["sampler_logprob_error"]
        lines.append(f"ours sampler ({e['sampling_dtype']}) vs the float32 forward, log-probs of its {e['tokens']} tokens: "
                     f"mean |diff| {e['mean_abs']:.2g}, max {e['max_abs']:.2g} nats")
    if ours.get("fast_paths"):
        lines.append(fast_paths_line(ours["fast_paths"], report.get("machine", {})))
    if "lower_bound_s" in ours:
        lb, lim = ours["lower_bound_s"], ours["machine_limits"]
        lines.append(f"lower bound (s): generation {lb['generation_s']:.2f} + frozen forwards "
                     f"{lb['frozen_forwards_s']:.2f} + train fwd+bwd {lb['train_forward_backward_s']:.2f} "
                     f"= {lb['update_s']:.2f}  (measured here: read {lim['read_gb_per_s']:.0f} GB/s, "
                     f"matmul {lim['matmul_gflop_per_s']:.0f} GFLOP/s)")
    met = ratios["meets_targets"]
    mark = lambda ok: {True: "met", False: "NOT met", None: "n/a"}[ok]  # noqa: E731
    lines += [
        "",
        f"episodes/s ours / TRL      {_fmt(ratios['episodes_per_s_ours_over_trl'], '.2f'):>8}   "
        f"target >= {TARGETS['episodes_per_s_ours_over_trl_min']}: {mark(met['episodes_per_s'])}",
        f"peak RSS ours / TRL        {_fmt(ratios['peak_rss_ours_over_trl'], '.2f'):>8}   target <= 0.5: {mark(met['peak_rss'])}",
        f"update / building blocks   {_fmt(ratios['update_over_building_blocks'], '.2f'):>8}   target <= 1.2: {mark(met['update_over_building_blocks'])}",
        f"update / lower bound       {_fmt(ratios.get('update_over_lower_bound'), '.2f'):>8}   "
        f"target <= 1.3: {mark(met.get('update_over_lower_bound'))}",
        f"generation / lower bound   {_fmt(ratios.get('generation_over_lower_bound'), '.2f'):>8}   "
        f"target <= 2.0: {mark(met.get('generation_over_lower_bound'))}",
        "Rewards differ: TRL scores with a 135M reward model (random head), ours with the task checker.",
    ]
    busy = busy_machine_note(report)
    if busy:
        lines.append(busy)
    return "\n".join(lines)


def fast_paths_line(record: dict, machine: dict) -> str:
    """Which CPU fast paths ours ran with, how they were chosen, and on which host."""
    chosen = record["chosen"]
    times = record.get("times_s") or {}
    measured = "; estimated s per update: " + ", ".join(f"{k} {v:.3f}" for k, v in times.items()) if times else ""
    return (f"ours fast paths: packed kernels {chosen['packed_cpu_linears']}, decode loop {chosen['decode_loop']}, "
            f"sampling {chosen['sampling_dtype']} ({record['how']}) on {machine.get('cpu_model', '?')} "
            f"[{' '.join(machine.get('cpu_flags') or []) or 'no flags read'}]{measured}")


def busy_machine_note(report: dict) -> str | None:
    """A warning when the 1-minute load average exceeded the core count by more than 25% while a
    trainer ran (the benchmark's own threads count in the load, so a load equal to the cores is
    the benchmark alone on a machine it fills)."""
    cores = report.get("machine", {}).get("cpu_count") or 1
    loads = [report.get("machine", {}).get(key) for key in ("load_average_before", "load_average_after")]
    loads += [report[side].get("load_average") for side in ("ours", "trl")]
    worst = max((load[0] for load in loads if load), default=0.0)
    if worst <= 1.25 * cores:
        return None
    return (f"WARNING: load average up to {worst:.1f} on {cores} cores: other processes competed for the CPU, "
            "so the wall times above are inflated (and not comparable between the two runs). "
            "Rerun on an otherwise idle machine.")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m course_utils bench",
                                     description="Speed and memory of our PPO trainer vs TRL 1.12.0's PPOTrainer.")
    parser.add_argument("--out", default="runs/bench.json", help="where to write the JSON report")
    parser.add_argument("--updates", type=int, default=BenchConfig.updates, help="timed updates per trainer")
    parser.add_argument("--warmup", type=int, default=BenchConfig.warmup, help="uncounted updates before timing")
    parser.add_argument("--only", choices=("ours", "trl"), default=None, help="run one trainer only")
    parser.add_argument("--model", default=BenchConfig.model, help="model name or folder (hub.resolve_model)")
    parser.add_argument("--threads", type=int, default=BenchConfig.threads, help="torch threads in each child")
    parser.add_argument("--batch-size", type=int, default=BenchConfig.batch_size, help="episodes per update")
    parser.add_argument("--response-length", type=int, default=BenchConfig.response_length,
                        help="response tokens (TRL response_length, our max_new_tokens)")
    parser.add_argument("--natural-eos", action="store_true",
                        help="let our responses stop at EOS (default: full length, like TRL's)")
    parser.add_argument("--old-logprobs-from", choices=("generation", "forward"), default=BenchConfig.old_logprobs_from,
                        help="ours: old log-probs from the sampler's logits (default, as the cpu preset) or a separate forward")
    parser.add_argument("--packed", choices=SWITCH_VALUES, default="auto",
                        help="ours: oneDNN-packed weights (true), PyTorch's default CPU kernels (false), or as a run "
                             "chooses them on this machine (auto, the default)")
    parser.add_argument("--no-packed", dest="packed", action="store_const", const="false", help="ours: --packed false")
    parser.add_argument("--decode-loop", choices=SWITCH_VALUES, default="auto",
                        help="ours: the library's sampling loop (true), transformers' generate (false), or as a run "
                             "chooses (auto, the default)")
    parser.add_argument("--no-decode-loop", dest="decode_loop", action="store_const", const="false",
                        help="ours: --decode-loop false")
    parser.add_argument("--sampling-dtype", choices=("float32", "bfloat16"), default=BenchConfig.sampling_dtype,
                        help="ours: sample through bfloat16 weight copies (opt-in; see sampler_logprob_error)")
    parser.add_argument("--timeout", type=float, default=None, help="seconds allowed per child (default: none)")
    parser.add_argument("--child", choices=("ours", "trl"), help=argparse.SUPPRESS)
    parser.add_argument("--child-config", help=argparse.SUPPRESS)
    parser.add_argument("--child-result", help=argparse.SUPPRESS)
    return parser


def main(argv: list[str] | None = None) -> dict:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["--"]:  # `python -m course_utils bench -- --out ...` passes the separator on
        argv = argv[1:]
    args = build_parser().parse_args(argv)
    if args.child:  # inside a child process: run one trainer, write its result
        cfg = BenchConfig(**json.loads(args.child_config))
        result = (run_trl if args.child == "trl" else run_ours)(cfg)
        Path(args.child_result).write_text(json.dumps(result, indent=2) + "\n")
        return result

    for flag, value, least in (("--updates", args.updates, 1), ("--threads", args.threads, 1),
                               ("--batch-size", args.batch_size, 1), ("--response-length", args.response_length, 1),
                               ("--warmup", args.warmup, 0)):
        if value < least:  # bad input: one `error:` line from the command line (ValueError), before any child
            raise ValueError(f"{flag} must be >= {least}, got {value}: e.g. {flag} {max(least, 1)}")
    safe_files.check_writable(Path(args.out).parent, "choose another --out")  # before minutes of benchmarking
    cfg = BenchConfig(model=args.model, updates=args.updates, warmup=args.warmup, threads=args.threads,
                      batch_size=args.batch_size, response_length=args.response_length,
                      full_length=not args.natural_eos, old_logprobs_from=args.old_logprobs_from,
                      packed_cpu_linears=SWITCH_VALUES[args.packed], decode_loop=SWITCH_VALUES[args.decode_loop],
                      sampling_dtype=args.sampling_dtype)
    sides = [args.only] if args.only else ["ours", "trl"]
    machine = machine_info()
    results = {"ours": {"skipped": True}, "trl": {"skipped": True}}
    with tempfile.TemporaryDirectory(prefix="bench-") as tmp:
        for side in sides:
            print(f"[bench] running {side} ({cfg.warmup} warm-up + {cfg.updates} timed updates) ...", flush=True)
            results[side] = run_child(side, cfg, Path(tmp), args.timeout)
    machine["load_average_after"] = _load_average()
    report = {
        "config": {**asdict(cfg), "dtype": "float32", "device": "cpu"},
        "ours": results["ours"],
        "trl": results["trl"],
        "ratios": compare(results["ours"], results["trl"]),
        "machine": machine,
        "versions": package_versions(),
    }
    out = Path(args.out)
    safe_files.write_json(out, report)
    report = safe_files.finite_or_none(report)  # what was written: a NaN (e.g. TRL's missing number) became null
    print(summary_text(report))
    print(f"\nwritten: {out}")
    failed = [side for side in sides if "error" in results[side]]
    if failed:
        raise SystemExit(f"bench: {', '.join(failed)} failed (see the log tail above and in {out})")
    return report


if __name__ == "__main__":
    main()
