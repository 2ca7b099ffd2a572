"""Which CPU fast paths pay on this machine: measured once, remembered, reported.

The two CPU fast paths (``packed_linear``: oneDNN-packed weights; ``decode_loop``: the library's
sampling loop instead of transformers' ``generate``) sped an update up by 30-50% on the AMD EPYC
host the kit was built on, and made it slower than plain PyTorch on an Intel Xeon (issue 32).
Which one wins depends on the CPU, the library versions, the model's shapes and the thread count,
so a config that says ``auto`` (the default) has them chosen by a stopwatch here:

- candidates: default or packed kernels x ``generate`` or the decode loop, float32; bfloat16
  sampling too, but only when the config asks for it (``sampling_dtype: auto`` lets it be chosen,
  and then only on a CPU with native bfloat16 instructions: flags ``avx512_bf16`` or ``amx_bf16``);
- workload: an estimate of the update's work that the switches change, on the run's own shapes
  (``measure_candidates``): a decode step of the batch's rows, timed over ``TOKENS`` steps, and a
  no-gradient forward timed on ``FORWARD_ROWS`` rows, scaled to the run's rows, tokens and forwards
  (21-22 s on two cores for four candidates on the Intel AMX host, against 44.5 s for the first
  calibration's miniature updates; only the switches left at auto are measured);
- alternated (A B C D, B C D A, ...) after an untimed warm-up, median of ``ROUNDS`` each, so one
  noisy sample (a background job, a frequency change) cannot decide;
- a fast path must beat plain PyTorch by ``MARGIN`` or plain PyTorch is kept: a near-tie is noise,
  and plain costs no extra memory;
- remembered in a JSON file (``cache_path``: ``$COURSE_CALIBRATION_FILE``, else
  ``$XDG_CACHE_HOME/course_utils/fast_paths.json``, else ``~/.cache/...``) under a key of what the
  answer depends on (``key_fields``): a second run does not measure, a new torch does.

An explicit true/false in the config is honoured without measuring; on CUDA and MPS ``auto`` is the
device's plain path (both fast paths are CPU-only). A cache file may also hold ``"pinned"`` values
that apply to every key, without measuring (the test suite pins today's defaults there, so that no
test depends on a stopwatch).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import platform
import statistics
import sys
import time
import warnings
from pathlib import Path
from typing import Callable, NamedTuple

import torch

from course_utils.machinery import safe_files
from course_utils.machinery.packed_linear import available as packed_available
from course_utils.machinery.packed_linear import forget, packed_linears
from course_utils.machinery.versions import package_versions

CACHE_ENV_VAR = "COURSE_CALIBRATION_FILE"
SWITCHES = ("packed_cpu_linears", "decode_loop", "sampling_dtype")
HOST_FLAGS = ("avx2", "avx512f", "avx512_vnni", "avx512_bf16", "amx_bf16")
NATIVE_BF16 = ("avx512_bf16", "amx_bf16")
TOKENS = 4
"""Decode steps each candidate samples per timed run (and response tokens of the timed forwards)."""
FORWARD_ROWS = 4
"""Rows the forwards are timed on; scaled to the batch's rows (a forward's cost is close to linear in them)."""
ROUNDS = 3
MARGIN = 0.05
"""A fast path is chosen only when it is at least this share faster than plain PyTorch."""
FORMAT = 1
ESTIMATE = "steps+forwards"
"""How ``times_s`` is estimated, part of the cache key: entries of the first calibration (a whole
miniature update per candidate) are measured again rather than mixed with these."""


class Candidate(NamedTuple):
    packed_cpu_linears: bool
    decode_loop: bool
    sampling_dtype: str = "float32"

    @property
    def name(self) -> str:
        return (f"{'packed' if self.packed_cpu_linears else 'default'}+"
                f"{'loop' if self.decode_loop else 'generate'}+{self.sampling_dtype}")

    @property
    def fast_paths(self) -> int:
        """How many fast paths this candidate takes (0: plain PyTorch)."""
        return int(self.packed_cpu_linears) + int(self.decode_loop) + int(self.sampling_dtype != "float32")


# ---------------------------------------------------------------------------------------------
# The host, the key, the file
# ---------------------------------------------------------------------------------------------


def host_info() -> dict:
    """The CPU as a learner would look it up, and the instruction-set flags that decide which
    kernels pay (Linux: /proc/cpuinfo; elsewhere the model from ``platform`` and no flags)."""
    model, flags = platform.processor() or platform.machine(), set()
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = (part.strip() for part in line.partition(":"))
            if key == "model name":
                model = value
            elif key in ("flags", "Features") and not flags:
                flags = set(value.split())
    return {"cpu_model": model, "flags": [f for f in HOST_FLAGS if f in flags], "machine": platform.machine(),
            "cpu_count": os.cpu_count()}


def native_bf16(host: dict) -> bool:
    return any(flag in host["flags"] for flag in NATIVE_BF16)


def cache_path() -> Path:
    override = os.environ.get(CACHE_ENV_VAR)
    if override:
        return Path(override).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "course_utils" / "fast_paths.json"


def key_fields(bundle, rows: int, host: dict, versions: dict | None = None) -> dict:
    """What the fastest choice depends on: the CPU, torch and transformers, the model's architecture,
    shapes and adapter, the rows a decode step multiplies and the threads doing it. Not the model's
    name or folder: each seed's SFT warm-up is another folder of the same shapes, and measuring
    again for it would cost every run of a benchmark the same seconds for the same answer."""
    versions = versions or package_versions(("torch", "transformers"))
    config = bundle.policy.base_model.config
    shape = {name: getattr(config, name, None) for name in
             ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
              "vocab_size")}
    return {"cpu_model": host["cpu_model"], "flags": host["flags"], "torch": versions.get("torch"),
            "transformers": versions.get("transformers"), "architecture": getattr(config, "model_type", None), "shape": shape,
            "dtype": str(bundle.policy.dtype), "lora": (bundle.manifest or {}).get("lora"), "rows": rows,
            "threads": torch.get_num_threads()}


def cache_key(fields: dict) -> str:
    return hashlib.sha256(json.dumps(fields, sort_keys=True, default=str).encode()).hexdigest()[:20]


def read_cache(path: Path, log: Callable[[str], None]) -> dict:
    """The cache file's contents; an unreadable one is reported in one line and treated as empty
    (it is rewritten after the next measurement)."""
    if not path.is_file():
        return {"format": FORMAT, "entries": {}}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(data, dict) or data.get("format") != FORMAT or not isinstance(data.get("entries", {}), dict):
            raise ValueError("not a fast-path cache of this format")
    except (OSError, UnicodeDecodeError, ValueError) as error:
        log(f"warning: the fast-path cache {path} is unreadable ({type(error).__name__}: "
            f"{(str(error).splitlines() or [''])[0][:80]}); measuring again")
        return {"format": FORMAT, "entries": {}}
    data.setdefault("entries", {})
    return data


def write_cache(path: Path, data: dict, log: Callable[[str], None]) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        safe_files.write_json(path, data)
    except OSError as error:  # a read-only home: the run goes on, the next one measures again
        log(f"warning: could not save the fast-path choice to {path} ({error.strerror or error}); "
            f"set {CACHE_ENV_VAR} to a writable file")


# ---------------------------------------------------------------------------------------------
# Measuring
# ---------------------------------------------------------------------------------------------


def measure(workloads: dict[str, Callable[[int], None]], rounds: int = ROUNDS, tokens: int = TOKENS,
            clock: Callable[[], float] = time.perf_counter) -> dict[str, float]:
    """Median seconds of each workload (called with ``tokens``). One untimed warm-up call each
    (1 token: packs the weights, fills the allocator), then ``rounds`` rounds, round r starting at
    the r-th workload, so no candidate always runs first or after the same neighbour."""
    names = list(workloads)
    for name in names:
        workloads[name](1)
    samples: dict[str, list[float]] = {name: [] for name in names}
    for r in range(rounds):
        for name in names[r % len(names):] + names[:r % len(names)]:
            start = clock()
            workloads[name](tokens)
            samples[name].append(clock() - start)
    return {name: float(statistics.median(times)) for name, times in samples.items()}


def sampling_run(bundle, rows: int, candidate: Candidate) -> Callable[[int], None]:
    """``rows`` two-word prompts sample ``tokens`` tokens with ``candidate``'s switches (EOS banned,
    so every candidate samples as many). The prompts are short so that the time is the decode
    steps', the part the switches change most; the prefill is timed with the forwards."""
    from course_utils.rollout import SamplingSettings, generate

    prompts = ["Say hi."] * rows

    def run(tokens: int) -> None:
        generate(bundle, None, prompts, SamplingSettings(max_new_tokens=tokens, min_new_tokens=tokens), seed=0,
                 packed=candidate.packed_cpu_linears, decode_loop=candidate.decode_loop,
                 sampling_dtype=candidate.sampling_dtype)

    return run


def forward_run(bundle, rollout, packed: bool) -> Callable[[int], None]:
    """One no-gradient forward of the policy over a few of the batch's prompts and ``tokens``
    response tokens, through packed or default kernels: the kernel every frozen forward of an
    update runs (and the prefill of its sampling)."""
    from course_utils.rollout import sequence_forward

    def run(tokens: int) -> None:
        with torch.no_grad(), packed_linears(bundle.policy, packed):
            sequence_forward(bundle.policy, rollout.query_ids, rollout.query_mask, rollout.response_ids[:, :tokens],
                             rollout.response_mask[:, :tokens])

    return run


def measure_candidates(bundle, prompts: list[str], candidates: list[Candidate], forwards: int,
                       new_tokens: int = 32) -> dict[str, float]:
    """Estimated seconds of one update's work that the switches change, for each candidate,
    built from three short measurements (median of ``ROUNDS`` alternated runs each):

        step(c)     = seconds of one decode step of all ``len(prompts)`` rows with c's switches
                      (``TOKENS`` steps from two-word prompts, divided by ``TOKENS``)
        forward(k)  = seconds of one no-gradient forward over ``FORWARD_ROWS`` of the prompts plus
                      ``TOKENS`` response tokens with kernel k, scaled to all rows
        update(c)   = prefill + new_tokens * step(c) + forwards * forward over prompt + new_tokens,

    where the prefill and the longer forwards scale forward(k) by their token counts (a forward's
    cost is close to linear in its tokens at these sizes). ``forwards`` are the passes an update
    makes whose kernels the choice changes (the reference, the training forward's frozen layers,
    the old-policy forward when separate; the backward runs on the dense weights either way);
    ``new_tokens`` is the run's max_new_tokens, an upper bound on the steps a rollout takes.
    Timing the forwards on a few rows and the steps from short prompts, rather than a whole
    miniature update per candidate, is what keeps the measurement to seconds. The global random
    state and the policy's train/eval mode are left as they were; packed copies made here are
    dropped (the run re-packs what it uses, so a run that chooses the default kernels does not
    keep a copy of the weights it never reads)."""
    from course_utils.rollout import SamplingSettings, generate

    policy, rows = bundle.policy, len(prompts)
    sub = prompts[:FORWARD_ROWS]
    was_training = policy.training
    try:
        with torch.random.fork_rng(devices=[]), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # min_new_tokens' off-policy note: these samples are thrown away
            policy.eval()
            rollout = generate(bundle, None, sub, SamplingSettings(max_new_tokens=TOKENS, min_new_tokens=TOKENS),
                               seed=0, packed=False, decode_loop=False)
            workloads = {f"sample {c.name}": sampling_run(bundle, rows, c) for c in candidates}
            workloads.update({f"forward {p}": forward_run(bundle, rollout, p)
                              for p in sorted({c.packed_cpu_linears for c in candidates})})
            parts = measure(workloads, rounds=ROUNDS)
    finally:
        policy.train(was_training)
        forget([m for m in policy.modules() if isinstance(m, torch.nn.Linear)])
    prompt_tokens = rollout.query_ids.shape[1]
    per_token = {p: parts[f"forward {p}"] * rows / len(sub) / (prompt_tokens + TOKENS)
                 for p in {c.packed_cpu_linears for c in candidates}}
    return {c.name: per_token[c.packed_cpu_linears] * (prompt_tokens + forwards * (prompt_tokens + new_tokens))
            + new_tokens * parts[f"sample {c.name}"] / TOKENS for c in candidates}


# ---------------------------------------------------------------------------------------------
# Choosing
# ---------------------------------------------------------------------------------------------


def candidates_for(policy, host: dict, sampling_dtype: str) -> list[Candidate]:
    """Every candidate this machine can run: the float32 four (two where oneDNN packing is
    unavailable), and bfloat16 sampling where the config allows it and the CPU has it natively
    (or the config asks for it outright)."""
    packed = [False, True] if packed_available(policy) else [False]
    found = [Candidate(p, loop) for p in packed for loop in (False, True)]
    bf16 = sampling_dtype == "bfloat16" or (sampling_dtype == "auto" and native_bf16(host))
    if bf16 and packed_available(policy, torch.bfloat16):
        found += [Candidate(True, loop, "bfloat16") for loop in (False, True)]
    return found


def choose(times: dict[str, float], allowed: list[Candidate], margin: float = MARGIN) -> Candidate:
    """The fastest allowed candidate, unless it beats the plainest allowed one (fewest fast paths)
    by less than ``margin``: then the plainest."""
    plain = min(allowed, key=lambda c: c.fast_paths)
    best = min(allowed, key=lambda c: times[c.name])
    return best if times[best.name] < (1 - margin) * times[plain.name] else plain


def _allowed(candidates: list[Candidate], requested: dict) -> list[Candidate]:
    return [c for c in candidates if all(requested[k] in ("auto", getattr(c, k)) for k in SWITCHES)]


def _plain(requested: dict) -> dict:
    """``auto`` read as plain PyTorch (the device's own path); bfloat16 sampling, asked for outright,
    runs only on the packed path, so it keeps that on (a machine that cannot is then told why)."""
    plain = {"packed_cpu_linears": requested["sampling_dtype"] == "bfloat16", "decode_loop": False,
             "sampling_dtype": "float32"}
    return {k: plain[k] if v == "auto" else v for k, v in requested.items()}


def resolve(config, bundle, prompts: list[str], log: Callable[[str], None] | None = None,
            forwards: int | None = None) -> dict:
    """The fast paths a run takes and how they were chosen, for the run manifest:
    ``{"chosen": {field: value}, "requested", "how", "host"}``, and when measured or cached
    ``"times_s"`` (each candidate's estimated seconds per update, ``measure_candidates``), ``"margin"``, ``"key"``
    and ``"cache_file"``. ``config`` needs the fields of ``SWITCHES``, ``model``, ``max_new_tokens``
    and ``old_logprobs_from``; ``prompts`` are one batch's (their count is the decode step's rows).
    ``forwards``: the no-gradient forwards besides sampling that the choice speeds up; None counts a
    PPO update's (an evaluation that only samples passes 0)."""
    log = log or _stderr
    requested = {k: getattr(config, k) for k in SWITCHES}
    record, policy = {"requested": requested, "host": host_info()}, bundle.policy
    if "auto" not in requested.values():
        return {**record, "chosen": requested, "how": "set in the config"}
    if policy.device.type != "cpu":
        return {**record, "chosen": _plain(requested), "how": f"auto on {policy.device.type}: the plain path "
                                                              "(the fast paths are CPU-only)"}
    candidates = candidates_for(policy, record["host"], requested["sampling_dtype"])
    allowed = _allowed(candidates, requested)
    if len(allowed) <= 1:
        return {**record, "chosen": allowed[0]._asdict() if allowed else _plain(requested),
                "how": "the only candidate this machine and config allow"}
    path = cache_path()
    cache, record["cache_file"] = read_cache(path, log), str(path)
    if isinstance(cache.get("pinned"), dict):
        return {**record, "chosen": _pinned(requested, cache["pinned"]), "how": f"pinned in {path}"}
    if forwards is None:
        forwards = 1 + int(getattr(config, "old_logprobs_from", "forward") == "forward") + int(policy.is_lora)
    fields = {**key_fields(bundle, len(prompts), record["host"]), "forwards": forwards,
              "new_tokens": config.max_new_tokens, "estimate": ESTIMATE}
    entry, how = cache["entries"].get(cache_key(fields)), "cached"
    if not _complete(entry, allowed):
        log(f"measuring which CPU fast paths pay on this machine ({len(allowed)} candidates, once; "
            f"remembered in {path}) ...")
        start = time.perf_counter()
        times = measure_candidates(bundle, prompts, allowed, forwards, new_tokens=config.max_new_tokens)
        entry, how = {"key": fields, "model": str(config.model), "times_s": times, "tokens": TOKENS, "rounds": ROUNDS,
                      "measured_s": round(time.perf_counter() - start, 2),
                      "measured_at": time.strftime("%Y-%m-%dT%H:%M:%S%z")}, "measured"
        cache["entries"][cache_key(fields)] = entry
        write_cache(path, cache, log)
    chosen = choose(entry["times_s"], allowed)
    if how == "measured":
        log(f"fast paths: {chosen.name} (measured in {entry['measured_s']:.0f} s; estimated s per update: "
            + ", ".join(f"{name} {s:.3f}" for name, s in entry["times_s"].items()) + ")")
    return {**record, "chosen": chosen._asdict(), "how": how, "times_s": entry["times_s"], "margin": MARGIN,
            "key": fields}


def _complete(entry, allowed: list[Candidate]) -> bool:
    """A cache entry holds a number for every allowed candidate (else it is measured again)."""
    times = entry.get("times_s") if isinstance(entry, dict) else None
    return isinstance(times, dict) and all(isinstance(times.get(c.name), (int, float)) for c in allowed)


def _pinned(requested: dict, pinned: dict) -> dict:
    """Pinned values for the switches left at auto (plain where a pinned value is missing or bad)."""
    valid = {"packed_cpu_linears": (True, False), "decode_loop": (True, False), "sampling_dtype": ("float32", "bfloat16")}
    plain = _plain(requested)
    return {k: pinned[k] if requested[k] == "auto" and pinned.get(k) in valid[k] else plain[k] for k in SWITCHES}


def _stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)
