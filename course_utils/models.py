"""The four models of PPO for language models, and the bundle that holds them.

    policy       the causal LM being trained (LoRA adapter through peft, or full fine-tuning)
    reference    a frozen snapshot of the starting policy, used only for the KL penalty.
                 With LoRA it is the *same* weights with the adapter switched off (no second copy
                 in memory); with full fine-tuning it is a frozen deep copy.
    value head   a scalar head V(s) on the policy's last hidden state: one forward pass of the
                 shared backbone gives both the next-token logits and the values.
    reward       a frozen scorer of whole responses: a programmatic checker or a learned model
                 with its own tokenizer. Both return one raw score per sequence.

``load_bundle()`` loads all four and records a manifest (model source and hash, tokenizer and
chat-template hash, precision, quantization, shared parameters, versions). ``print(bundle)`` is
the first picture of lesson 1: who is trained, who is frozen, what shares memory with whom.
"""

from __future__ import annotations

import copy
import hashlib
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Iterator

import torch
from torch import nn

from course_utils.device import default_dtype, pick_device, seed_everything
from course_utils.machinery import hub
from course_utils.machinery import packed_linear
from course_utils.machinery.versions import package_versions
from course_utils.machinery.parameters import (_unique_parameters, chat_template_sha256, count_parameters, memory_mb,
                                               tied_parameter_names)
from course_utils.rewards import CheckerReward, RewardFunction

__all__ = [
    "LoRASettings",
    "PolicyWithValue",
    "ModelBundle",
    "load_bundle",
    "model_manifest",
]

ALL_PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


# ---------------------------------------------------------------------------------------------
# Policy + value head
# ---------------------------------------------------------------------------------------------


@dataclass
class LoRASettings:
    """Low-rank adapters on the policy (peft). The update of a weight W is (alpha / rank) · B A,
    with A of shape [rank, in] (random init) and B of shape [out, rank] (zero init), so the
    adapted policy starts exactly equal to the base model.

    rank: the rank r of the update; more rank = more capacity and more trainable parameters.
    alpha: scale numerator; the update is multiplied by alpha / rank (2.0 with the defaults).
    dropout: dropout on the adapter input during training (0 keeps rollouts and training forwards
        identical, which the ratio-equals-1 check relies on).
    target_modules: names of the linear layers that get adapters; the default covers every
        attention (q, k, v, o) and MLP (gate, up, down) projection of a Llama-style block.
    """

    rank: int = 16
    alpha: int = 32
    dropout: float = 0.0
    target_modules: tuple[str, ...] = ALL_PROJECTIONS

    def to_peft_config(self):
        from peft import LoraConfig

        if self.rank < 1:
            raise ValueError(f"LoRA rank must be >= 1, got {self.rank}; use lora=None for full fine-tuning")
        return LoraConfig(
            r=self.rank,
            lora_alpha=self.alpha,
            lora_dropout=self.dropout,
            target_modules=list(self.target_modules),
            bias="none",
            task_type="CAUSAL_LM",
        )


def _is_peft(model: nn.Module) -> bool:
    try:
        from peft import PeftModel
    except ImportError:  # pragma: no cover - peft is a dependency
        return False
    return isinstance(model, PeftModel)


class PolicyWithValue(nn.Module):
    """A causal LM with a scalar value head on its last hidden state.

    ``forward(input_ids, attention_mask, position_ids)`` returns ``(logits [B, L, V], values [B, L])``
    from ONE pass through the backbone: the logits come from the LM head, the values from
    ``value_head(hidden_states[-1])`` (the final, normalised hidden state that the LM head reads).

    value_head: ``nn.Linear(hidden, 1)`` in float32, weight and bias initialised to zero, so every
    value is exactly 0 before training. Why zero: a random head would output values of arbitrary
    scale, and the first GAE advantages A_t = δ_t + ... with δ_t = r_t + γ V_{t+1} - V_t would be
    dominated by that noise; with V = 0 the first advantages are the (shaped) rewards themselves,
    and the head's gradient is still non-zero (d loss / d w = (V - R) · h), so it learns at once.
    It is kept in float32 even when the backbone runs in bfloat16, because value regression
    targets are small differences that half precision rounds away.

    value_model: optional separate backbone for the critic (a decoder without LM head, e.g.
    ``AutoModel.from_pretrained``); then the values cost a second forward pass, and the critic's
    gradients never touch the policy's weights.
    """

    def __init__(self, lm: nn.Module, value_model: nn.Module | None = None):
        super().__init__()
        self.lm = lm
        self.value_model = value_model
        config = self.base_model.config
        hidden = getattr(config, "hidden_size", None) or config.get_text_config().hidden_size
        self.value_head = nn.Linear(hidden, 1, dtype=torch.float32)
        nn.init.zeros_(self.value_head.weight)
        nn.init.zeros_(self.value_head.bias)
        device = next(lm.parameters()).device
        self.value_head.to(device)

    # -- what kind of policy this is --------------------------------------------------------

    @property
    def is_lora(self) -> bool:
        """True when ``lm`` is a peft model (LoRA adapter on frozen base weights)."""
        return _is_peft(self.lm)

    @property
    def base_model(self) -> nn.Module:
        """The transformers model underneath (without the peft wrapper)."""
        return self.lm.get_base_model() if self.is_lora else self.lm

    @property
    def config(self):
        return self.base_model.config

    @property
    def device(self) -> torch.device:
        return next(self.lm.parameters()).device

    @property
    def dtype(self) -> torch.dtype:
        return next(self.lm.parameters()).dtype

    def trainable_parameters(self) -> list[nn.Parameter]:
        """Parameters the optimizer should update: the LoRA matrices (or every LM weight under
        full fine-tuning), plus the value head (and the separate value model, if any)."""
        return [p for p in _unique_parameters(self) if p.requires_grad]

    # -- the forward pass -------------------------------------------------------------------

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        position_ids: torch.Tensor | None = None,
        logits_to_keep: int = 0,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """One backbone pass: ``(logits, values)``.

        Shapes: ``input_ids``, ``attention_mask``, ``position_ids`` are ``[B, L]``; ``logits`` is
        ``[B, L, V]`` (or ``[B, K, V]`` for the last ``K = logits_to_keep`` positions, which skips
        the LM-head matmul for prompt positions that are never scored); ``values`` is ``[B, L]``
        float32 at every position. ``position_ids`` must be given for left-padded batches
        (see ``rollout.positions_from_attention_mask``), otherwise padding shifts the positions.
        """
        out = self.lm(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            output_hidden_states=self.value_model is None,
            use_cache=False,
            logits_to_keep=logits_to_keep,
        )
        if self.value_model is None:
            hidden = out.hidden_states[-1]  # final normalised hidden state, what the LM head reads
        else:
            hidden = self.value_model(
                input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids, use_cache=False
            ).last_hidden_state
        values = self.value_head(hidden.to(self.value_head.weight.dtype)).squeeze(-1)
        return out.logits, values

    # -- the reference and generation views of the same weights ------------------------------

    @contextmanager
    def reference_mode(self) -> Iterator["PolicyWithValue"]:
        """Inside this block the LoRA adapter is disabled: the model computes the frozen
        reference policy π_ref (the base weights), with no second copy in memory.

        Only for LoRA policies; under full fine-tuning the reference is a separate frozen copy
        (``ModelBundle.reference``) and this raises. The values computed inside are meaningless.
        """
        if not self.is_lora:
            raise RuntimeError(
                "reference_mode() needs a LoRA policy (reference = adapter disabled). Under full "
                "fine-tuning the reference is the frozen copy in bundle.reference; use "
                "`with bundle.reference_model() as ref:` which handles both cases."
            )
        with self.lm.disable_adapter():
            yield self

    @contextmanager
    def merged_adapter(self, exact: bool = True) -> Iterator["PolicyWithValue"]:
        """Fold the LoRA update into the base weights (W <- W + (alpha/r) B A) for the block, then
        take it out again. Generation inside the block runs one matmul per projection instead of
        three, which is what makes CPU rollouts fast. No-op without LoRA.

        Unmerging subtracts the same update, which restores W only up to one rounding step
        (|ΔW| ~ 1e-7 · |W| in float32, ~0.4% of a weight in bfloat16). Small, but it accumulates
        over a run, makes the "frozen" reference drift, and makes a resumed run differ from an
        uninterrupted one. So by default (``exact=True``) the base weights are copied before
        merging and put back bit for bit afterwards; this costs one copy of the adapted weights
        while generating. ``exact=False`` skips the copy (lower peak memory, tiny drift).
        """
        if not self.is_lora:
            yield self
            return
        from peft.tuners.lora import LoraLayer

        base_layers = [m.get_base_layer() for m in self.lm.modules() if isinstance(m, LoraLayer)]
        saved = [(layer.weight, layer.weight.detach().clone()) for layer in base_layers] if exact else []
        # peft writes through weight.data, which a version counter does not see: the packed CPU
        # copies of these layers (machinery.packed_linear) are set aside, and put back only when
        # the weights are restored bit for bit.
        aside = packed_linear.set_aside(base_layers)
        self.lm.merge_adapter()
        try:
            yield self
        finally:
            self.lm.unmerge_adapter()
            packed_linear.forget(base_layers)  # the merged weights' copies
            with torch.no_grad():
                for weight, original in saved:
                    weight.copy_(original)
            if exact:
                packed_linear.put_back(aside)


# ---------------------------------------------------------------------------------------------
# The manifest and the bundle
# ---------------------------------------------------------------------------------------------


def _model_identity(folder: Path) -> dict:
    """Where the weights came from: the provisioning record, the hub revision, or a file hash."""
    record = hub.read_manifest(folder)
    identity = {"source": record.get("source", str(folder))}
    if "source_sha256" in record:
        identity["source_sha256"] = record["source_sha256"]
    if folder.parent.name == "snapshots":  # a Hugging Face cache folder: .../snapshots/<commit>
        identity["revision"] = folder.name
    if "source_sha256" not in identity and "revision" not in identity:
        # No other identity: hash the weight files themselves.
        digest = hashlib.sha256()
        for pattern in hub.WEIGHT_PATTERNS:
            for path in sorted(folder.glob(pattern)):
                digest.update(hub.sha256_of(path).encode())
        identity["weights_sha256"] = digest.hexdigest()
    identity["quantization"] = record.get("quantization", "none")
    return identity


def model_manifest(
    model_name: str,
    folder: str | Path,
    tokenizer,
    policy: PolicyWithValue,
    lora: LoRASettings | None = None,
    reward: RewardFunction | None = None,
    reference: nn.Module | None = None,
    seed: int | None = None,
) -> dict:
    """Everything needed to say which four models a run used (JSON-serialisable dict).

    Keys: model, folder, source (+ source_sha256 / revision / weights_sha256), quantization,
    architecture, tokenizer {class, name, vocab size, eos/pad tokens, chat_template_sha256},
    precision, device, fine_tuning ("lora" or "full"), lora settings, value head, reference,
    reward, shared_parameters, versions, seed.
    """
    folder = Path(folder)
    base = policy.base_model
    quant_config = getattr(base.config, "quantization_config", None)
    identity = _model_identity(folder)
    shared = [f"tied in the policy: {names}" for names in tied_parameter_names(base)]
    if policy.value_model is None:
        shared.append("value head reads the policy backbone's last hidden state (one forward for logits and values)")
    if policy.is_lora:
        shared.append("reference = policy base weights with the LoRA adapter disabled (no copy)")
    return {
        "model": model_name,
        "folder": str(folder),
        **identity,
        "quantization": str(quant_config) if quant_config else identity["quantization"],
        "architecture": (getattr(base.config, "architectures", None) or [type(base).__name__])[0],
        "parameters": count_parameters(base)[1] if policy.is_lora else sum(count_parameters(base)),  # without adapters
        "tokenizer": {
            "class": type(tokenizer).__name__,
            "name": str(getattr(tokenizer, "name_or_path", "")),
            "vocab_size": len(tokenizer),
            "eos_token": tokenizer.eos_token,
            "pad_token": tokenizer.pad_token,
            "pad_equals_eos": tokenizer.pad_token_id == tokenizer.eos_token_id,
            "padding_side": tokenizer.padding_side,
            "chat_template_sha256": chat_template_sha256(tokenizer),
        },
        "precision": str(policy.dtype).replace("torch.", ""),
        "device": str(policy.device),
        "fine_tuning": "lora" if policy.is_lora else "full",
        "lora": {**asdict(lora), "target_modules": list(lora.target_modules)} if lora is not None else None,
        "value_head": {
            "init": "zeros (weight and bias)",
            "dtype": "float32",
            "backbone": "shared with the policy" if policy.value_model is None else "separate value model",
        },
        "reference": "policy with adapter disabled" if policy.is_lora else ("frozen copy" if reference is not None else None),
        "reward": reward.describe() if hasattr(reward, "describe") else type(reward).__name__,
        "shared_parameters": shared,
        "versions": package_versions(("torch", "transformers", "peft", "course_utils")),
        "seed": seed,
    }


@dataclass
class ModelBundle:
    """The four models of a PPO run, their tokenizer, device and manifest.

    policy: the trained causal LM with its value head (``PolicyWithValue``).
    tokenizer: the policy's tokenizer (left padding, chat template).
    reward: the frozen scorer (``CheckerReward`` or ``reward_model.RewardModel``).
    reference: the frozen copy under full fine-tuning; None with LoRA, where the reference is
        the policy with its adapter disabled. Use ``with bundle.reference_model() as ref`` for both.
    manifest: see ``model_manifest``.
    """

    policy: PolicyWithValue
    tokenizer: Any
    reward: RewardFunction
    reference: PolicyWithValue | None
    manifest: dict
    device: torch.device
    lora: LoRASettings | None = None

    @contextmanager
    def reference_model(self) -> Iterator[PolicyWithValue]:
        """Yield the module that computes π_ref: the policy with its adapter off (LoRA) or the
        frozen copy (full fine-tuning). Its forward has the policy's signature."""
        if self.reference is not None:
            yield self.reference
        else:
            with self.policy.reference_mode() as ref:
                yield ref

    def summary(self) -> list[dict]:
        """One row per role: role, trainable and frozen parameters (owned by that role, so the
        columns add up), memory of those parameters in MB, dtype, device, and what it shares."""
        policy = self.policy
        dtype = str(policy.dtype).replace("torch.", "")
        device = str(policy.device)
        rows = []
        trainable, frozen = count_parameters(policy.lm)
        shares = {(True, True): "reference (base weights) and value head (backbone)",
                  (True, False): "reference (base weights)", (False, True): "value head (backbone)",
                  (False, False): "-"}[(policy.is_lora, policy.value_model is None)]
        rows.append(dict(role="policy", trainable=trainable, frozen=frozen, memory_mb=memory_mb(policy.lm),
                         dtype=dtype, device=device, shared_with=shares))
        if self.reference is None:
            rows.append(
                dict(role="reference", trainable=0, frozen=0, memory_mb=0.0, dtype=dtype, device=device,
                     shared_with="policy base weights, LoRA adapter disabled (no copy)")
            )
        else:
            t, f = count_parameters(self.reference.lm)
            rows.append(
                dict(role="reference", trainable=t, frozen=f, memory_mb=memory_mb(self.reference.lm),
                     dtype=str(self.reference.dtype).replace("torch.", ""), device=str(self.reference.device),
                     shared_with="- (frozen copy of the starting policy)")
            )
        value_modules = nn.ModuleList([policy.value_head] + ([policy.value_model] if policy.value_model is not None else []))
        t, f = count_parameters(value_modules)
        rows.append(
            dict(role="value head", trainable=t, frozen=f, memory_mb=memory_mb(value_modules),
                 dtype="float32" if policy.value_model is None else f"{dtype} + float32 head", device=device,
                 shared_with="policy backbone (one forward: logits and values)"
                 if policy.value_model is None else "- (separate value model)")
        )
        reward_model = self.reward if isinstance(self.reward, nn.Module) else getattr(self.reward, "model", None)
        if isinstance(reward_model, nn.Module):
            t, f = count_parameters(reward_model)
            p = next(reward_model.parameters())
            rows.append(
                dict(role="reward", trainable=t, frozen=f, memory_mb=memory_mb(reward_model),
                     dtype=str(p.dtype).replace("torch.", ""), device=str(p.device),
                     shared_with="- (own tokenizer and template; reads decoded text)")
            )
        else:
            rows.append(
                dict(role="reward", trainable=0, frozen=0, memory_mb=0.0, dtype="-", device="cpu",
                     shared_with=f"- ({getattr(self.reward, 'name', type(self.reward).__name__)}, no weights)")
            )
        return rows

    def summary_text(self) -> str:
        rows = self.summary()
        header = ("role", "trainable", "frozen", "memory MB", "dtype", "device", "shares")
        table = [
            (r["role"], f"{r['trainable']:,}", f"{r['frozen']:,}", f"{r['memory_mb']:.1f}", r["dtype"], r["device"], r["shared_with"])
            for r in rows
        ]
        total = (
            "total",
            f"{sum(r['trainable'] for r in rows):,}",
            f"{sum(r['frozen'] for r in rows):,}",
            f"{sum(r['memory_mb'] for r in rows):.1f}",
            "", "", "",
        )
        widths = [max(len(str(line[i])) for line in [header, *table, total]) for i in range(len(header))]
        numeric = {1, 2, 3}

        def fmt(line):
            return "  ".join(str(c).rjust(w) if i in numeric else str(c).ljust(w) for i, (c, w) in enumerate(zip(line, widths))).rstrip()

        rule = "-" * len(fmt(header))
        m = self.manifest
        lines = [
            f"ModelBundle: {m.get('model')} ({m.get('fine_tuning')} fine-tuning, {m.get('precision')}, {m.get('device')})",
            fmt(header), rule, *[fmt(t) for t in table], rule, fmt(total),
            f"source: {m.get('source')}",
            f"quantization: {m.get('quantization')}",
            f"chat template sha256: {str(m.get('tokenizer', {}).get('chat_template_sha256'))[:16]}…",
        ]
        return "\n".join(lines)

    def __repr__(self) -> str:
        return self.summary_text()

    def _repr_html_(self) -> str:
        from html import escape

        rows = self.summary()
        head = "".join(f"<th>{h}</th>" for h in ("role", "trainable", "frozen", "memory MB", "dtype", "device", "shares"))
        body = "".join(
            "<tr>"
            + f"<td><b>{escape(r['role'])}</b></td>"
            + f"<td style='text-align:right;color:{'#1a7f37' if r['trainable'] else '#888'}'>{r['trainable']:,}</td>"
            + f"<td style='text-align:right'>{r['frozen']:,}</td>"
            + f"<td style='text-align:right'>{r['memory_mb']:.1f}</td>"
            + "".join(f"<td>{escape(str(r[k]))}</td>" for k in ("dtype", "device", "shared_with"))
            + "</tr>"
            for r in rows
        )
        m = self.manifest
        caption = escape(f"{m.get('model')} — {m.get('fine_tuning')} fine-tuning, {m.get('precision')}, {m.get('device')}")
        return f"<table><caption>{caption}</caption><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def disable_dropout(module: nn.Module) -> int:
    """Set every dropout probability to 0 (as TRL does for PPO) and return how many were on.

    With dropout the training forward is a different function from the no-grad forward that
    computed the old log-probs, so the first ratio is not 1 (measured: 0.97-1.04)."""
    switched = 0
    for m in module.modules():
        if isinstance(m, nn.modules.dropout._DropoutNd) and m.p > 0:
            m.p, switched = 0.0, switched + 1
    # Attention dropout in transformers is a float on the attention module, not a Dropout module.
    for m in module.modules():
        if isinstance(getattr(m, "attention_dropout", None), float) and m.attention_dropout > 0:
            m.attention_dropout, switched = 0.0, switched + 1
    return switched


def check_target_modules(lm: nn.Module, targets, model) -> None:
    """Every LoRA target must name a layer of ``lm`` (peft matches a name, or the end of a dotted
    one): peft itself accepts a list where some names match nothing (those layers silently get no
    adapter) and answers one where none does without naming the layers there are."""
    names = [name for name, _ in lm.named_modules()]
    missing = [t for t in targets if not any(n == t or n.endswith("." + t) for n in names)]
    if missing:
        linears = sorted({n.rsplit(".", 1)[-1] for n, m in lm.named_modules()
                          if isinstance(m, nn.Linear) and not n.endswith("lm_head")})
        example = ["q_proj", "v_proj"] if {"q_proj", "v_proj"} <= set(linears) else linears[:2]
        raise ValueError(f"lora_target_modules {missing} match no layer of {model}; its linear layers are "
                         f"{', '.join(linears)}: use some of these, e.g. lora_target_modules=[{','.join(example)}]")


def load_bundle(
    model: str | Path = hub.DEFAULT_MODEL,
    lora: LoRASettings | None = LoRASettings(),
    reward: RewardFunction | None = None,
    device: str | torch.device | None = None,
    dtype: torch.dtype | None = None,
    seed: int = 0,
    separate_value_model: bool = False,
) -> ModelBundle:
    """Load the four models.

    model: a name or folder for ``hub.resolve_model`` (default: SmolLM2-135M-Instruct, offline).
    lora: LoRA settings, or None for full fine-tuning (then the reference is a frozen deep copy,
        which doubles the weight memory).
    reward: a ``RewardFunction``; default ``CheckerReward("partial")``.
    device, dtype: default ``pick_device()`` and ``default_dtype(device)``.
    seed: seeds every RNG before the LoRA matrices A are drawn, so the same seed gives the same
        adapter (B starts at zero either way).
    separate_value_model: give the critic its own copy of the backbone instead of sharing.
    """
    device = pick_device(device) if not isinstance(device, torch.device) else device
    dtype = dtype or default_dtype(device)
    seed_everything(seed)
    folder = hub.resolve_model(model)
    tokenizer = hub.load_tokenizer(folder, require_chat_template=False)
    lm = hub.load_causal_lm(folder, device=device, dtype=dtype)
    reference = None
    if lora is not None:
        from peft import get_peft_model

        check_target_modules(lm, lora.target_modules, model)
        lm = get_peft_model(lm, lora.to_peft_config())
    else:
        reference = PolicyWithValue(copy.deepcopy(lm)).requires_grad_(False).eval()
        lm.requires_grad_(True)
    value_model = None
    if separate_value_model:
        from transformers import AutoModel

        value_model = AutoModel.from_pretrained(folder, dtype=dtype).to(device)
    policy = PolicyWithValue(lm, value_model)
    disable_dropout(policy)
    if reference is not None:
        disable_dropout(reference)
    reward = reward if reward is not None else CheckerReward("partial")
    if isinstance(reward, nn.Module):  # a learned reward model is frozen: PPO never trains it
        reward.eval().requires_grad_(False)
    manifest = model_manifest(str(model), folder, tokenizer, policy, lora, reward, reference, seed)
    return ModelBundle(policy=policy, tokenizer=tokenizer, reward=reward, reference=reference,
                       manifest=manifest, device=device, lora=lora)
