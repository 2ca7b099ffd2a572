"""Device, dtype, threads and seeding: the few lines every lesson starts with.

The course runs on a laptop CPU, an Apple GPU (MPS) or a CUDA GPU. ``pick_device`` chooses in
that order of preference (cuda, then mps, then cpu) unless the learner says otherwise through the
``device`` argument or the ``COURSE_DEVICE`` environment variable.
"""

from __future__ import annotations

import os
import random

import numpy as np
import torch

DEVICE_ENV_VAR = "COURSE_DEVICE"
THREADS_ENV_VAR = "COURSE_THREADS"
VALID_DEVICES = ("cpu", "mps", "cuda")


class DeviceUnavailableError(RuntimeError):
    """A device was asked for by name on a machine that lacks it (bad input, not a bug: the
    command line answers it with one line)."""


def pick_device(device: str | None = None) -> torch.device:
    """Return the device to run on.

    Order: the ``device`` argument, then ``$COURSE_DEVICE``, then the best available of
    cuda -> mps -> cpu. "auto" (or None / empty) defers to ``$COURSE_DEVICE`` and otherwise picks
    the best available, so the environment variable also steers configs that say "auto".
    """
    explicit = device if device and device.strip().lower() != "auto" else None
    requested = (explicit or os.environ.get(DEVICE_ENV_VAR) or "auto").strip().lower()
    if requested == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
            return torch.device("mps")
        return torch.device("cpu")
    kind = requested.split(":")[0]
    if kind not in VALID_DEVICES:
        raise ValueError(
            f"Unknown device {requested!r}. Use one of 'auto', 'cpu', 'mps', 'cuda' "
            f"(or 'cuda:N'), e.g. export {DEVICE_ENV_VAR}=cpu."
        )
    if kind == "cuda" and not torch.cuda.is_available():
        raise DeviceUnavailableError(f"Device {requested!r} was requested but CUDA is not available here; use 'cpu' "
                                     f"or 'auto' (ppo: --set device=cpu; sft: --device cpu; or unset {DEVICE_ENV_VAR}).")
    if kind == "mps" and not torch.backends.mps.is_available():
        raise DeviceUnavailableError(f"Device {requested!r} was requested but MPS is not available here; use 'cpu' "
                                     f"or 'auto' (ppo: --set device=cpu; sft: --device cpu; or unset {DEVICE_ENV_VAR}).")
    return torch.device(requested)


def default_dtype(device: torch.device | str) -> torch.dtype:
    """The dtype policy: float32 on cpu and mps (half precision is slow or unsupported there for
    training), bfloat16 on CUDA GPUs that support it, float32 otherwise."""
    device = torch.device(device)
    if device.type == "cuda" and torch.cuda.is_bf16_supported():
        return torch.bfloat16
    return torch.float32


def seed_everything(seed: int) -> None:
    """Seed Python's ``random``, NumPy and torch (all devices) so a lesson gives the same numbers
    run after run. Sampling on a GPU may still differ across machines; lessons assert with a
    tolerance where that matters."""
    random.seed(seed)
    np.random.seed(seed % (2**32))
    torch.manual_seed(seed)
    if torch.cuda.is_available():
        torch.cuda.manual_seed_all(seed)


def set_threads(n: int | None = None) -> int:
    """Set torch's intra-op thread count: ``n``, else ``$COURSE_THREADS``, else the number of
    cores (capped at 8: small models gain nothing from more). Returns the count in use."""
    if n is None:
        raw = os.environ.get(THREADS_ENV_VAR, "0").strip() or "0"
        try:
            n = int(raw)
        except ValueError:
            raise ValueError(f"${THREADS_ENV_VAR} is {raw!r}, not a number of threads: set it to a whole number, "
                             f"e.g. export {THREADS_ENV_VAR}=4, or unset it to use the cores") from None
        n = n or min(os.cpu_count() or 1, 8)
    torch.set_num_threads(max(1, n))
    return torch.get_num_threads()
