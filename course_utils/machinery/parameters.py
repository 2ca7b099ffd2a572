"""Counting parameters and memory of a module, tied tensors counted once; hashing a chat template."""

from __future__ import annotations

import hashlib
import json

from torch import nn


def _unique_parameters(module: nn.Module) -> list[nn.Parameter]:
    """Parameters of ``module``, each tied tensor counted once (SmolLM2 ties lm_head to the
    input embedding: two names, one tensor)."""
    seen, unique = set(), []
    for p in module.parameters():
        key = (p.data_ptr(), p.numel(), p.device)  # tied parameters share storage
        if key not in seen:
            seen.add(key)
            unique.append(p)
    return unique


def count_parameters(module: nn.Module | None) -> tuple[int, int]:
    """(trainable, frozen) parameter counts of ``module``, tied tensors counted once."""
    if module is None:
        return 0, 0
    trainable = frozen = 0
    for p in _unique_parameters(module):
        if p.requires_grad:
            trainable += p.numel()
        else:
            frozen += p.numel()
    return trainable, frozen


def memory_mb(module: nn.Module | None) -> float:
    """Memory held by the parameters and buffers of ``module`` in MB (10^6 bytes), tied tensors
    counted once. Activations, gradients and optimizer state come on top of this."""
    if module is None:
        return 0.0
    total = sum(p.numel() * p.element_size() for p in _unique_parameters(module))
    total += sum(b.numel() * b.element_size() for b in module.buffers())
    return total / 1e6


def tied_parameter_names(module: nn.Module) -> list[str]:
    """Groups of parameter names that point at one tensor, e.g. ``lm_head.weight = model.embed_tokens.weight``."""
    groups: dict[tuple, list[str]] = {}
    for name, p in module.named_parameters(remove_duplicate=False):
        groups.setdefault((p.data_ptr(), p.numel(), p.device), []).append(name)
    return [" = ".join(names) for names in groups.values() if len(names) > 1]


def chat_template_sha256(tokenizer) -> str | None:
    """sha256 of the tokenizer's chat template text (None if it has none). Two runs whose
    template hashes differ rendered their prompts differently."""
    template = getattr(tokenizer, "chat_template", None)
    if not template:
        return None
    text = template if isinstance(template, str) else json.dumps(template, sort_keys=True)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


