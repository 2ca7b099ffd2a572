"""Checkpoints: written atomically, read back exactly, the random-number state included.

A checkpoint is one folder, ``<run>/checkpoint/`` with ``state.pt`` (whatever the trainer's
``state_dict()`` returns) and ``meta.json``. It is written into a temporary folder and renamed over
the old one, so a run killed at any moment leaves either the old or the new checkpoint, never half
of one. The trainer saves only updates that broke no stop rule: the folder is the last-known-good
state.
"""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path

import numpy as np
import torch

from course_utils.machinery import safe_files

CHECKPOINT = "checkpoint"


# Settings that decide what a run trains on: the model and its adapter's shape, the reward, and the
# prompt stream (its seed, split, families, batch and grouping). A resume that changed one of them
# would splice two different runs into one log, so it is refused; any other change (more updates,
# another evaluation split, a new learning rate) is allowed and logged.
SAME_ON_RESUME = ("model", "lora_rank", "lora_alpha", "lora_target_modules", "reward", "reward_model_path",
                  "train_split", "task_families", "batch_size", "samples_per_prompt", "prompt_sampling", "seed")


def config_changes(saved: dict, now: dict) -> dict[str, tuple]:
    """The fields whose value differs between a checkpoint's config and the resuming run's:
    ``{field: (saved value, new value)}``; fields one of them lacks (a newer or older kit) are skipped."""
    return {name: (saved[name], value) for name, value in now.items() if name in saved and saved[name] != value}


def check_resumed_config(saved: dict, now: dict, run_dir: Path) -> str:
    """Refuse (ValueError, one line with the fix) a resume that changes a ``SAME_ON_RESUME`` field;
    return the other changes as text for the log ("" when nothing changed)."""
    changes = config_changes(saved, now)
    refused = {name: change for name, change in changes.items() if name in SAME_ON_RESUME}
    if refused:
        was = ", ".join(f"{name}={old!r}" for name, (old, _) in refused.items())
        asked = ", ".join(f"{name}={new!r}" for name, (_, new) in refused.items())
        raise ValueError(f"the checkpoint in {run_dir} was trained with {was} and this run asks for {asked}: "
                         "resume with the checkpoint's values, or start afresh under another run_name")
    return ", ".join(f"{name} {old!r} -> {new!r}" for name, (old, new) in changes.items())


class DamagedCheckpointError(RuntimeError):
    """A checkpoint file exists but cannot be read (truncated, corrupted, or not ours)."""


def rng_state() -> dict:
    """The state of every random-number generator a run draws from: Python's, NumPy's, torch's
    CPU generator and, where there is one, the GPU's (CUDA or MPS sample on the device)."""
    state = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    if torch.backends.mps.is_available():
        state["mps"] = torch.mps.get_rng_state()
    return state


def restore_rng(state: dict) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])
    if "mps" in state and torch.backends.mps.is_available():
        torch.mps.set_rng_state(state["mps"])


def save(run_dir: Path, state: dict, update: int) -> Path:
    """Write ``state`` as ``run_dir/checkpoint`` atomically (temporary folder, then rename)."""
    final = run_dir / CHECKPOINT
    tmp = run_dir / f".{CHECKPOINT}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        torch.save(state, tmp / "state.pt")
        (tmp / "meta.json").write_text(json.dumps({"update": update}) + "\n")
    except BaseException:  # a full disk or a kill: clear the half-written copy, keep the old checkpoint
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return safe_files.replace_folder(tmp, final)  # the old checkpoint moves aside to .checkpoint.old first


def saved_update(run_dir: Path) -> int | None:
    """The update of the checkpoint on disk in ``run_dir`` (the one ``load`` would read), or None
    when there is none: what a message may promise to resume from is read here, never assumed."""
    for folder in (Path(run_dir) / CHECKPOINT, Path(run_dir) / f".{CHECKPOINT}.old"):
        if (folder / "state.pt").is_file():
            try:
                return int(json.loads((folder / "meta.json").read_text())["update"])
            except (OSError, ValueError, KeyError, TypeError):
                return -1  # a state without a readable meta.json: there is a checkpoint, of an unknown update
    return None


def load(run_dir: Path, folder: Path | None = None) -> dict | None:
    """The saved state, or None when the run has no checkpoint yet. A run killed between the two
    renames of ``save`` left its checkpoint as ``.checkpoint.old``: that one is read then."""
    folder = Path(folder or run_dir / CHECKPOINT)
    if not (folder / "state.pt").is_file():
        old = run_dir / f".{CHECKPOINT}.old"
        if not (old / "state.pt").is_file():
            return None
        folder = old
    try:
        return torch.load(folder / "state.pt", weights_only=False)
    except (RuntimeError, EOFError, OSError, ValueError) as error:  # torch's "PytorchStreamReader failed ..."
        raise DamagedCheckpointError(
            f"the checkpoint {folder / 'state.pt'} is damaged and cannot be read ({type(error).__name__}: "
            f"{str(error).splitlines()[0][:120]}). Fix: start the run fresh (drop --resume, or use another "
            f"run_name), or delete {folder} and resume from what is left"
        ) from error
