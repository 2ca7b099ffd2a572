"""Faster no-gradient forwards on a CPU: each ``nn.Linear`` read from a oneDNN-packed copy.

A decode step multiplies a few rows (the batch) by every weight matrix: a matrix-vector product
whose speed is how fast the kernel streams the weights. On this 2-core machine PyTorch's default
float32 kernel streams SmolLM2's weights at about 13 GB/s; the same product through oneDNN with the
weights stored in its packed layout (``torch.utils.mkldnn.MkldnnLinear``) at about 17 GB/s, and a
whole rollout of 8 x 32 tokens takes 2.0 s instead of 3.0 s (measured, see ``make bench``). The
arithmetic is the same float32 arithmetic in another summation order: logits agree to ~1e-4, and
the tokens sampled under a fixed generator are the same (``tests/test_packed_linear.py``).

Used only where it is safe and pays:

- without gradients (sampling, the old-policy and reference forwards) every large layer is swapped;
- with gradients (the training forward) only FROZEN layers are (the LoRA base weights): their
  forward runs packed and their backward, which only has to pass the gradient on to the input
  (``dx = dy · W``; a frozen weight gets none), runs on the dense weight. The LoRA matrices
  themselves stay ordinary modules;
- on a CPU with oneDNN, in float32, for layers with at least ``MIN_ELEMENTS`` weights (smaller ones
  gain nothing);
- the packed copies are cached per layer and rebuilt when the layer's weight changes: the q/v
  layers with LoRA merged in for sampling (about 50 MB for SmolLM2, tens of milliseconds), or
  every layer under full fine-tuning. A change is seen through the weight's version counter, which
  an in-place update bumps; a write through ``weight.data`` does not bump it, so code that writes
  weights that way must call ``forget`` (as the LoRA merge does). The cache costs one more copy
  of the packed weights in memory.
"""

from __future__ import annotations

import functools
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


def forget(layers) -> None:
    """Drop the packed copies of ``layers``. Call it after changing their weights in a way the
    version counter does not see: peft merges LoRA through ``weight.data``, which leaves
    ``weight._version`` unchanged (``models.PolicyWithValue.merged_adapter`` calls this)."""
    for layer in layers:
        _PACKED.pop(layer, None)


def set_aside(layers) -> dict:
    """Take the packed copies of ``layers`` out of the cache, to ``put_back`` once their weights
    hold exactly these values again (``merged_adapter`` restores the base weights bit for bit)."""
    return {layer: _PACKED.pop(layer)[2] for layer in layers if layer in _PACKED}


def put_back(aside: dict) -> None:
    """Return copies taken by ``set_aside``, valid for the weights as they are now."""
    for layer, packed in aside.items():
        _PACKED[layer] = (layer.weight._version, layer.weight.data_ptr(), packed)


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


class _PackedForwardDenseBackward(torch.autograd.Function):
    """y = x · Wᵀ (+ b) through the packed copy; in the backward dx = dy · W on the dense weight."""

    @staticmethod
    def forward(ctx, x, weight, packed):
        ctx.save_for_backward(weight)
        return packed(x)

    @staticmethod
    def backward(ctx, grad_output):
        (weight,) = ctx.saved_tensors
        return grad_output @ weight, None, None


def _frozen_packed_forward(dense: nn.Linear, x: torch.Tensor) -> torch.Tensor:
    return _PackedForwardDenseBackward.apply(x, dense.weight, _packed_copy(dense))


@contextmanager
def packed_linears(model: nn.Module, enabled: bool = True) -> Iterator[int]:
    """Within the block, the large float32 ``nn.Linear`` layers of ``model`` compute through their
    packed copies: all of them without gradients, the frozen ones with gradients. Each layer keeps
    its place, its name and its hooks (only its ``forward`` is replaced, and put back on exit).
    Yields the number of layers switched (0 when disabled or not available)."""
    if not enabled or not available(model):
        yield 0
        return
    training = torch.is_grad_enabled()
    layers = [m for m in model.modules()
              if type(m) is nn.Linear and m.weight.numel() >= MIN_ELEMENTS and "forward" not in m.__dict__
              and not (training and m.weight.requires_grad)]
    try:
        for layer in layers:  # into __dict__: nn.Module.__setattr__ would register a module as a child
            layer.__dict__["forward"] = (functools.partial(_frozen_packed_forward, layer) if training
                                         else _packed_copy(layer))
        yield len(layers)
    finally:
        for layer in layers:
            layer.__dict__.pop("forward", None)
