"""Faster no-gradient forwards on a CPU: each ``nn.Linear`` read from a oneDNN-packed copy.

A decode step multiplies a few rows (the batch) by every weight matrix: a matrix-vector product
whose speed is how fast the kernel streams the weights. On this 2-core machine PyTorch's default
float32 kernel streams SmolLM2's weights at about 12 GB/s. oneDNN with the weights reordered once
into its own blocked layout (``torch.ops.mkldnn._reorder_linear_weight``, then
``torch.ops.mkldnn._linear_pointwise`` on ordinary tensors: the pair inductor's CPU weight
prepacking uses) streams them at about 25 GB/s; ``torch.utils.mkldnn.MkldnnLinear``, which converts
the input to a oneDNN tensor and the output back on every call, at about 14-19 GB/s (measured). The
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
  7, and each streams a larger matrix (measured with MkldnnLinear: the blocks' linear layers took
  22 ms a step instead of 26 ms). What is checked is the identity of the input tensor: a member
  handed another tensor than the first member got (say a pre-hook replaced it) computes the
  whole group's product again, so the answer never depends on the call order;
- the packed copies are cached per layer (or group) and rebuilt when a weight or bias changes:
  every layer under full fine-tuning, or the adapted layers when LoRA is merged in for sampling
  (``rollout.generate(merge_lora=True)``; by default the packed path keeps the adapter beside the
  base weights instead, so nothing is re-packed). A change is seen through the tensor's version
  counter, which an in-place update bumps; a write through ``weight.data`` does not bump it, so
  code that writes weights that way must call ``forget`` (as the LoRA merge does). The cache costs
  one more copy of the weights in memory.

Opt-in, for sampling only: ``compute_dtype=torch.bfloat16`` packs bfloat16 copies of the weights
(half the bytes a decode step streams) and rounds each layer's input to bfloat16; the product
comes out in bfloat16 (the LM head's logits too) and is widened back to float32, so everything
between the linear layers stays float32. That is no longer the same
distribution: the sampler is π_old up to bfloat16 rounding, measured by ``make bench`` as the mean
|Δ log-prob| of the sampled tokens against the float32 forward (``rollout.generate``'s
``sampling_dtype``). These copies are kept apart from the float32 ones and dropped by ``forget``.

``_reorder_linear_weight`` and ``_linear_pointwise`` are private, undocumented PyTorch operators;
where they are missing (another build) ``available`` is False and the layers stay dense.
"""

from __future__ import annotations

import functools
import itertools
import weakref
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterator

import torch
from torch import nn

MIN_ELEMENTS = 1 << 16
"""Layers with fewer weights than this are left dense (a value head, a tiny test model)."""

FUSED_GROUPS = (("q_proj", "k_proj", "v_proj"), ("gate_proj", "up_proj"))
"""Children of one module that are called on the same input (Llama and Qwen2 attention and MLP),
in the order the module calls them."""

BATCH_HINT = None
"""The number of rows oneDNN is told to reorder the weights for (None: its general layout)."""

_PACKED: "weakref.WeakKeyDictionary[nn.Linear, tuple[tuple, _Prepacked]]" = weakref.WeakKeyDictionary()
"""layer -> (the state of its parameters when packed, see ``_parameter_keys``; the packed copy)."""
_FUSED: "weakref.WeakKeyDictionary[nn.Module, tuple[tuple, tuple, _Prepacked]]" = weakref.WeakKeyDictionary()
"""parent module -> (its member layers, their parameters' state when packed, the packed copy)."""
_LOW: dict = {torch.bfloat16: (weakref.WeakKeyDictionary(), weakref.WeakKeyDictionary())}
"""compute dtype -> its own (layer cache, group cache), laid out like ``_PACKED`` and ``_FUSED``."""


def _caches(dtype: torch.dtype) -> tuple:
    return (_PACKED, _FUSED) if dtype == torch.float32 else _LOW[dtype]


def available(model: nn.Module, compute_dtype: torch.dtype = torch.float32) -> bool:
    """True when ``model`` sits on a CPU in float32 and this PyTorch has oneDNN (for
    ``compute_dtype=torch.bfloat16``: and oneDNN has bfloat16 kernels for this CPU)."""
    try:
        weight = next(model.parameters())
    except StopIteration:
        return False
    ops = torch.ops.mkldnn
    dense_ok = (weight.device.type == "cpu" and weight.dtype == torch.float32 and torch.backends.mkldnn.is_available()
                and hasattr(ops, "_linear_pointwise") and hasattr(ops, "_reorder_linear_weight"))
    if compute_dtype == torch.float32 or not dense_ok:
        return dense_ok
    return compute_dtype in _LOW and hasattr(ops, "_is_mkldnn_bf16_supported") and ops._is_mkldnn_bf16_supported()


class _Prepacked:
    """y = x · Wᵀ + b with W reordered once into oneDNN's layout; x and y are ordinary tensors.
    With a ``dtype`` other than float32, W, b and x are rounded to it and y comes back in x's dtype."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None, dtype: torch.dtype = torch.float32):
        self.dtype = dtype
        self.weight = torch.ops.mkldnn._reorder_linear_weight(weight.detach().to(dtype), BATCH_HINT)
        self.bias = None if bias is None else bias.detach().to(dtype, copy=True)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        # "none", [], "": no activation fused into the product.
        y = torch.ops.mkldnn._linear_pointwise(x.to(self.dtype).contiguous(), self.weight, self.bias, "none", [], "")
        return y.to(x.dtype)


def forget(layers) -> None:
    """Drop the packed copies of ``layers`` and of the groups they belong to. Call it after
    changing their weights in a way the version counter does not see: peft merges LoRA through
    ``weight.data``, which leaves ``weight._version`` unchanged
    (``models.PolicyWithValue.merged_adapter`` calls this)."""
    set_aside(layers)


@dataclass
class SetAside:
    """Packed copies taken out of the cache by ``set_aside``."""

    layers: dict   # layer -> _Prepacked
    groups: dict   # parent module -> (member layers, _Prepacked)


def set_aside(layers) -> SetAside:
    """Take the packed copies of ``layers`` (and of the groups they belong to) out of the cache,
    to ``put_back`` once their weights hold exactly these values again (``merged_adapter``
    restores the base weights bit for bit). Copies already stale are dropped, not kept, and so are
    the low-precision copies (rebuilt when next needed)."""
    layers = set(layers)
    for layer_cache, group_cache in _LOW.values():
        for layer in layers:
            layer_cache.pop(layer, None)
        for parent, (members, _, _) in list(group_cache.items()):
            if layers.intersection(members):
                del group_cache[parent]
    aside = SetAside({}, {})
    for layer in layers:
        if layer in _PACKED:
            keys, packed = _PACKED.pop(layer)
            if keys == _parameter_keys([layer]):
                aside.layers[layer] = packed
    for parent, (members, keys, packed) in list(_FUSED.items()):
        if layers.intersection(members):
            del _FUSED[parent]
            if keys == _parameter_keys(members):
                aside.groups[parent] = (members, packed)
    return aside


def put_back(aside: SetAside) -> None:
    """Return copies taken by ``set_aside``, valid for the weights as they are now."""
    for layer, packed in aside.layers.items():
        _PACKED[layer] = (_parameter_keys([layer]), packed)
    for parent, (members, packed) in aside.groups.items():
        _FUSED[parent] = (members, _parameter_keys(members), packed)


def _parameter_keys(layers) -> tuple:
    """What tells a packed copy is stale: each weight's and bias's version counter and address."""
    return tuple((p._version, p.data_ptr()) for layer in layers
                 for p in (layer.weight, layer.bias) if p is not None)


def _packed_copy(linear: nn.Linear, dtype: torch.dtype = torch.float32) -> _Prepacked:
    """The oneDNN copy of ``linear``, from the cache when its parameters have not changed since."""
    keys, cache = _parameter_keys([linear]), _caches(dtype)[0]
    cached = cache.get(linear)
    if cached is None or cached[0] != keys:
        with torch.no_grad():
            cached = (keys, _Prepacked(linear.weight, linear.bias, dtype))
        cache[linear] = cached
    return cached[1]


class _PackedForwardDenseBackward(torch.autograd.Function):
    """y = x · [W_1; ...; W_n]ᵀ (+ b) through the packed copy of one layer (n = 1) or of a stacked
    group; in the backward dx = Σ_j dy_j · W_j on the dense, frozen weights (which get no gradient)."""

    @staticmethod
    def forward(ctx, x, packed, *weights):
        ctx.save_for_backward(*weights)
        return packed(x)

    @staticmethod
    def backward(ctx, grad_output):
        weights = ctx.saved_tensors
        grads = grad_output.split([w.shape[0] for w in weights], dim=-1)
        return sum(g @ w for g, w in zip(grads, weights)), None, *(None for _ in weights)


def _frozen_packed_forward(dense: nn.Linear, x: torch.Tensor) -> torch.Tensor:
    return _PackedForwardDenseBackward.apply(x, _packed_copy(dense), dense.weight)


def _fused_packed_copy(parent: nn.Module, members: tuple, dtype: torch.dtype = torch.float32) -> _Prepacked:
    """One oneDNN copy of ``members`` stacked: y = x · [W_1; W_2; ...]ᵀ (+ [b_1; b_2; ...])."""
    keys, cache = _parameter_keys(members), _caches(dtype)[1]
    cached = cache.get(parent)
    if cached is None or cached[0] != members or cached[1] != keys:
        with torch.no_grad():
            bias = None if members[0].bias is None else torch.cat([m.bias for m in members])
            cached = (members, keys, _Prepacked(torch.cat([m.weight for m in members]), bias, dtype))
        cache[parent] = cached
    return cached[2]


class _FusedGroup:
    """The members of one group share a single product; member i returns its slice of it."""

    def __init__(self, parent: nn.Module, members: tuple, with_grad: bool, dtype: torch.dtype = torch.float32):
        self.parent, self.members, self.with_grad, self.dtype = parent, members, with_grad, dtype
        ends = list(itertools.accumulate(m.out_features for m in members))
        self.slices = [slice(start, end) for start, end in zip([0] + ends[:-1], ends)]
        self.clear()

    def clear(self) -> None:
        self.input = self.output = None

    def member_forward(self, index: int, x: torch.Tensor) -> torch.Tensor:
        # The first member starts a new call of the parent module: always compute. The others take
        # their slice only if handed the very tensor the first got (identity, not equality).
        if index == 0 or x is not self.input:
            packed = _fused_packed_copy(self.parent, self.members, self.dtype)
            self.input = x
            self.output = (_PackedForwardDenseBackward.apply(x, packed, *(m.weight for m in self.members))
                           if self.with_grad else packed(x))
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


def _fused_groups(model: nn.Module, eligible: list[nn.Linear], with_grad: bool,
                  dtype: torch.dtype = torch.float32) -> list[_FusedGroup]:
    """The groups of ``FUSED_GROUPS`` whose members are all eligible, read inputs of one width and
    all have a bias or none."""
    eligible = set(eligible)
    groups = []
    for parent in model.modules():
        for names in FUSED_GROUPS:
            members = tuple(_linear_of(getattr(parent, name, None)) for name in names)
            if (all(m in eligible for m in members) and len({m.in_features for m in members}) == 1
                    and len({m.bias is None for m in members}) == 1):
                groups.append(_FusedGroup(parent, members, with_grad, dtype))
    return groups


@contextmanager
def packed_linears(model: nn.Module, enabled: bool = True, compute_dtype: torch.dtype = torch.float32) -> Iterator[int]:
    """Within the block, the large float32 ``nn.Linear`` layers of ``model`` compute through their
    packed copies: all of them without gradients, the frozen ones with gradients. Each layer keeps
    its place, its name and its hooks (only its ``forward`` is replaced, and put back on exit).
    ``compute_dtype=torch.bfloat16`` (without gradients only) multiplies in bfloat16, see above.
    Yields the number of layers switched (0 when disabled or not available)."""
    if isinstance(enabled, str):  # a config's "auto" is truthy: it would pack without anyone choosing to
        raise ValueError(f"packed_linears(enabled={enabled!r}): pass true or false; a config's \"auto\" is decided "
                         "by machinery.calibration.resolve (PPOTrainer does it when it starts)")
    with_grad = torch.is_grad_enabled()
    if with_grad and compute_dtype != torch.float32:
        raise ValueError(f"packed_linears: compute_dtype {compute_dtype} is for sampling only; call it under "
                         "torch.no_grad() or leave compute_dtype at float32")
    if not enabled or not available(model, compute_dtype):
        yield 0
        return
    layers = [m for m in model.modules()
              if type(m) is nn.Linear and m.weight.numel() >= MIN_ELEMENTS and "forward" not in m.__dict__
              and not (with_grad and any(p.requires_grad for p in m.parameters()))]
    groups = _fused_groups(model, layers, with_grad, compute_dtype)
    try:
        # Into __dict__: nn.Module.__setattr__ would register a module as a child.
        for group in groups:
            for index, member in enumerate(group.members):
                member.__dict__["forward"] = functools.partial(group.member_forward, index)
        for layer in layers:
            if "forward" not in layer.__dict__:
                layer.__dict__["forward"] = (functools.partial(_frozen_packed_forward, layer) if with_grad
                                             else _packed_copy(layer, compute_dtype))
        yield len(layers)
    finally:
        for group in groups:
            group.clear()
        for layer in layers:
            layer.__dict__.pop("forward", None)
