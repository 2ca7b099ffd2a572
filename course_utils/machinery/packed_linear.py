"""Faster no-gradient forwards on a CPU: each ``nn.Linear`` read from a oneDNN-packed copy.

A decode step multiplies a few rows (the batch) by every weight matrix: a matrix-vector product
whose speed is how fast the kernel streams the weights. On this 2-core machine PyTorch's default
float32 kernel streams SmolLM2's weights at about 13 GB/s; the same product through oneDNN with the
weights stored in its packed layout (``torch.utils.mkldnn.MkldnnLinear``) at about 17 GB/s, and a
whole rollout of 8 x 32 tokens takes 2.0 s instead of 3.0 s (measured, see ``make bench``). The
arithmetic is the same float32 arithmetic in another summation order: logits agree to ~1e-4, and
the tokens sampled under a fixed generator are the same (``tests/test_packed_linear.py``).

Used only where it is safe and pays:

- without gradients (sampling, the old-policy and reference forwards); a training forward keeps
  the dense modules, whose backward the LoRA gradients flow through;
- on a CPU with oneDNN, in float32, for layers with at least ``MIN_ELEMENTS`` weights (smaller ones
  gain nothing);
- the packed copies are cached per layer and rebuilt when the layer's weight changes: the q/v
  layers with LoRA merged in for sampling (about 50 MB for SmolLM2, tens of milliseconds), or
  every layer under full fine-tuning. The cache costs one more copy of the packed weights in memory.
"""

from __future__ import annotations

import weakref
from contextlib import contextmanager
from typing import Iterator

import torch
from torch import nn

MIN_ELEMENTS = 1 << 16
"""Layers with fewer weights than this are left dense (a value head, a tiny test model)."""

_PACKED: "weakref.WeakKeyDictionary[nn.Linear, tuple[int, int, nn.Module]]" = weakref.WeakKeyDictionary()


def available(model: nn.Module) -> bool:
    """True when ``model`` sits on a CPU in float32 and this PyTorch has oneDNN."""
    try:
        weight = next(model.parameters())
    except StopIteration:
        return False
    return weight.device.type == "cpu" and weight.dtype == torch.float32 and torch.backends.mkldnn.is_available()


def _packed_copy(linear: nn.Linear) -> nn.Module:
    """The oneDNN copy of ``linear``, from the cache when its weight has not changed since."""
    from torch.utils.mkldnn import MkldnnLinear

    key = (linear.weight._version, linear.weight.data_ptr())
    cached = _PACKED.get(linear)
    if cached is None or cached[:2] != key:
        with torch.no_grad():
            cached = (*key, MkldnnLinear(linear, torch.float32))
        _PACKED[linear] = cached
    return cached[2]


@contextmanager
def packed_linears(model: nn.Module, enabled: bool = True) -> Iterator[int]:
    """Within the block, every large float32 ``nn.Linear`` of ``model`` computes through its packed
    copy; the dense modules are put back on exit. Yields the number of layers swapped (0 when
    disabled or not available). Refuses to run with gradients enabled."""
    if not enabled or not available(model):
        yield 0
        return
    if torch.is_grad_enabled():
        raise RuntimeError("packed_linears is for no-gradient forwards; wrap the call in torch.no_grad()")
    swaps = [(parent, name, child) for parent in list(model.modules())
             for name, child in parent.named_children()
             if type(child) is nn.Linear and child.weight.numel() >= MIN_ELEMENTS]
    try:
        for parent, name, child in swaps:
            setattr(parent, name, _packed_copy(child))
        yield len(swaps)
    finally:
        for parent, name, child in swaps:
            setattr(parent, name, child)
