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
- layers that read the same input are packed as one: q/k/v of an attention block and gate/up of
  an MLP (``FUSED_GROUPS``). Each member's forward returns its slice of the one product, computed
  when the first member is called. A decode step then makes 4 oneDNN calls per block instead of
  7, and each streams a larger matrix: the block's linear layers take 22 ms a step instead of
  26 ms here. A member called with another input than the first (a pre-hook that changed it)
  computes its product anew, so the answer never depends on the call order;
- the packed copies are cached per layer (or group) and rebuilt when a weight changes: the q/v
  layers with LoRA merged in for sampling (about 90 MB for SmolLM2 with k fused in, tens of
  milliseconds), or every layer under full fine-tuning. A change is seen through the weight's version counter, which
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

FUSED_GROUPS = (("q_proj", "k_proj", "v_proj"), ("gate_proj", "up_proj"))
"""Children of one module that are called on the same input (Llama and Qwen2 attention and MLP),
in the order the module calls them."""

_PACKED: "weakref.WeakKeyDictionary[nn.Linear, tuple[int, int, nn.Module]]" = weakref.WeakKeyDictionary()
_FUSED: "weakref.WeakKeyDictionary[nn.Module, tuple[tuple, tuple, nn.Module]]" = weakref.WeakKeyDictionary()
"""parent module -> (its member layers, their weights' (version, address), the packed copy)."""


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
    set_aside(layers)


def set_aside(layers) -> dict:
    """Take the packed copies of ``layers`` (and of the groups they belong to) out of the cache,
    to ``put_back`` once their weights hold exactly these values again (``merged_adapter``
    restores the base weights bit for bit)."""
    layers = set(layers)
    aside = {layer: _PACKED.pop(layer)[2] for layer in layers if layer in _PACKED}
    for parent, (members, _, packed) in list(_FUSED.items()):
        if layers.intersection(members):
            del _FUSED[parent]
            aside[parent] = (members, packed)
    return aside


def put_back(aside: dict) -> None:
    """Return copies taken by ``set_aside``, valid for the weights as they are now."""
    for owner, packed in aside.items():
        if isinstance(packed, tuple):
            members, packed = packed
            _FUSED[owner] = (members, _weight_keys(members), packed)
        else:
            _PACKED[owner] = (*_weight_keys([owner])[0], packed)


def _weight_keys(layers) -> tuple:
    return tuple((layer.weight._version, layer.weight.data_ptr()) for layer in layers)


def _packed_copy(linear: nn.Linear) -> nn.Module:
    """The oneDNN copy of ``linear``, from the cache when its weight has not changed since."""
    from torch.utils.mkldnn import MkldnnLinear

    key = _weight_keys([linear])[0]
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


def _fused_packed_copy(parent: nn.Module, members: tuple) -> nn.Module:
    """One oneDNN copy of ``members`` stacked: y = x · [W_1; W_2; ...]ᵀ (+ [b_1; b_2; ...])."""
    from torch.utils.mkldnn import MkldnnLinear

    keys = _weight_keys(members)
    cached = _FUSED.get(parent)
    if cached is None or cached[0] != members or cached[1] != keys:
        with torch.no_grad():
            # skip_init: no random initialisation, which would move the global generator that
            # sampling draws from.
            stacked = nn.utils.skip_init(nn.Linear, members[0].in_features, sum(m.out_features for m in members),
                                         bias=members[0].bias is not None)
            stacked.weight.copy_(torch.cat([m.weight for m in members]))
            if stacked.bias is not None:
                stacked.bias.copy_(torch.cat([m.bias for m in members]))
            cached = (members, keys, MkldnnLinear(stacked, torch.float32))
        _FUSED[parent] = cached
    return cached[2]


class _FusedForwardDenseBackward(torch.autograd.Function):
    """y = x · [W_1; ...; W_n]ᵀ through the packed stack; dx = Σ_j dy_j · W_j on the dense weights."""

    @staticmethod
    def forward(ctx, x, packed, *weights):
        ctx.save_for_backward(*weights)
        return packed(x)

    @staticmethod
    def backward(ctx, grad_output):
        weights = ctx.saved_tensors
        grads = grad_output.split([w.shape[0] for w in weights], dim=-1)
        return sum(g @ w for g, w in zip(grads, weights)), None, *(None for _ in weights)


class _FusedGroup:
    """The members of one group share a single product; member i returns its slice of it."""

    def __init__(self, parent: nn.Module, members: tuple, training: bool):
        self.parent, self.members, self.training = parent, members, training
        ends = torch.tensor([m.out_features for m in members]).cumsum(0).tolist()
        self.slices = [slice(start, end) for start, end in zip([0] + ends[:-1], ends)]
        self.clear()

    def clear(self) -> None:
        self.input = self.output = None

    def member_forward(self, index: int, x: torch.Tensor) -> torch.Tensor:
        if index == 0 or x is not self.input:  # identity, not equality: the very tensor the first got
            packed = _fused_packed_copy(self.parent, self.members)
            self.input = x
            self.output = (_FusedForwardDenseBackward.apply(x, packed, *(m.weight for m in self.members))
                           if self.training else packed(x))
        out = self.output[..., self.slices[index]]
        if index == len(self.members) - 1:
            self.clear()  # do not hold activations between blocks
        return out


def _linear_of(module) -> nn.Linear | None:
    """The plain ``nn.Linear`` that computes ``module``'s product: itself, or a peft layer's base."""
    if type(module) is nn.Linear:
        return module
    base = getattr(module, "get_base_layer", None)
    return base() if base is not None and type(base()) is nn.Linear else None


def _fused_groups(model: nn.Module, eligible: list[nn.Linear], training: bool) -> list[_FusedGroup]:
    """The groups of ``FUSED_GROUPS`` whose members are all eligible and read inputs of one width."""
    eligible = set(eligible)
    groups = []
    for parent in model.modules():
        for names in FUSED_GROUPS:
            members = tuple(_linear_of(getattr(parent, name, None)) for name in names)
            if (all(m in eligible for m in members) and len({m.in_features for m in members}) == 1
                    and len({m.bias is None for m in members}) == 1):
                groups.append(_FusedGroup(parent, members, training))
    return groups


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
    groups = _fused_groups(model, layers, training)
    try:
        # Into __dict__: nn.Module.__setattr__ would register a module as a child.
        for group in groups:
            for index, member in enumerate(group.members):
                member.__dict__["forward"] = functools.partial(group.member_forward, index)
        for layer in layers:
            if "forward" not in layer.__dict__:
                layer.__dict__["forward"] = (functools.partial(_frozen_packed_forward, layer) if training
                                             else _packed_copy(layer))
        yield len(layers)
    finally:
        for group in groups:
            group.clear()
        for layer in layers:
            layer.__dict__.pop("forward", None)
