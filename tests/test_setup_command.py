"""Issue 53, item 5: `make setup` installs the torch build that fits the machine. Tested at the level
of the commands scripts/torch_install.py composes (nothing is installed here)."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("torch_install", ROOT / "scripts" / "torch_install.py")
torch_install = importlib.util.module_from_spec(spec)
spec.loader.exec_module(torch_install)

PIN = "torch==2.13.0"
CPU = ["py", "-m", "pip", "install", "-q", PIN, "--index-url", "https://download.pytorch.org/whl/cpu"]
PYPI = ["py", "-m", "pip", "install", "-q", PIN]


def test_the_pin_is_requirements_txt_exact_torch_version():
    assert torch_install.pinned_torch() == PIN
    assert PIN in (ROOT / "requirements.txt").read_text().splitlines()


def test_a_requirements_file_without_an_exact_torch_pin_is_refused(tmp_path):
    loose = tmp_path / "requirements.txt"
    loose.write_text("torch>=2.0\nnumpy==2.4.6\n")
    with pytest.raises(SystemExit, match="no exact torch==X pin"):
        torch_install.pinned_torch(loose)


@pytest.mark.parametrize("system, gpu, reachable, commands, words", [
    ("Linux", False, True, [CPU, PYPI], "no NVIDIA GPU: the CPU build"),
    ("Linux", False, False, [PYPI], "cannot be reached: PyPI's build instead"),
    ("Linux", True, True, [PYPI], "an NVIDIA GPU: PyPI's build (the CUDA build"),
    ("Darwin", False, True, [PYPI], "macOS: PyPI's build (CPU and MPS)"),
])
def test_the_command_fits_the_machine(system, gpu, reachable, commands, words):
    probed = []
    planned, why = torch_install.plan(system, gpu, "auto", lambda: probed.append(1) or reachable, PIN, "py")
    assert planned == commands and words in why
    assert probed == ([1] if system == "Linux" and not gpu else [])  # the CPU index is asked only when wanted


def test_the_build_can_be_chosen_by_hand():
    assert torch_install.plan("Linux", True, "cpu", lambda: True, PIN, "py")[0] == [CPU, PYPI]
    assert torch_install.plan("Linux", False, "pypi", lambda: True, PIN, "py")[0] == [PYPI]
    with pytest.raises(SystemExit, match="--build must be one of auto, cpu, pypi"):
        torch_install.choose_build("Linux", False, "cuda")


def test_a_gpu_is_seen_by_nvidia_smi_or_the_driver_folder():
    nothing = dict(which=lambda name: None, exists=lambda path: False)
    assert not torch_install.has_nvidia_gpu(**nothing)
    assert torch_install.has_nvidia_gpu(which=lambda name: "/usr/bin/nvidia-smi", exists=lambda path: False)
    assert torch_install.has_nvidia_gpu(which=lambda name: None, exists=lambda path: path == "/proc/driver/nvidia")


def test_a_failed_cpu_install_falls_back_to_pypi(monkeypatch, capsys):
    ran = []
    monkeypatch.setattr(torch_install, "installed_torch", lambda: None)
    monkeypatch.setattr(torch_install, "has_nvidia_gpu", lambda: False)
    monkeypatch.setattr(torch_install.platform, "system", lambda: "Linux")
    monkeypatch.setattr(torch_install, "index_reachable", lambda: True)
    monkeypatch.setattr(torch_install.subprocess, "run",
                        lambda command: ran.append(command) or type("Done", (), {"returncode": 0 if len(ran) > 1 else 1}))
    assert torch_install.main(["--python", "py"]) == 0
    assert ran == [CPU, PYPI] and "that failed: PyPI's build instead" in capsys.readouterr().out


def test_print_shows_the_commands_and_installs_nothing(monkeypatch, capsys):
    monkeypatch.setattr(torch_install, "has_nvidia_gpu", lambda: False)
    monkeypatch.setattr(torch_install.platform, "system", lambda: "Linux")
    monkeypatch.setattr(torch_install, "index_reachable", lambda: True)
    monkeypatch.setattr(torch_install.subprocess, "run", lambda *a, **k: pytest.fail("installed something"))
    assert torch_install.main(["--print", "--python", "py"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[1:] == [" ".join(CPU), "if that fails: " + " ".join(PYPI)]


def test_an_installed_pinned_torch_is_left_alone(monkeypatch, capsys):
    monkeypatch.setattr(torch_install, "installed_torch", lambda: "2.13.0+cpu")
    monkeypatch.setattr(torch_install, "index_reachable", lambda: pytest.fail("asked the network"))
    monkeypatch.setattr(torch_install.subprocess, "run", lambda *a, **k: pytest.fail("installed something"))
    assert torch_install.main([]) == 0 and "torch 2.13.0+cpu is installed already" in capsys.readouterr().out


def test_make_setup_installs_torch_first_with_the_script():
    recipe = (ROOT / "Makefile").read_text().split("$(STAMP): ", 1)[1].split("\n\n", 1)[0].splitlines()
    steps = [line.strip() for line in recipe[1:]]
    script = next(i for i, step in enumerate(steps) if step.startswith("$(PY) scripts/torch_install.py"))
    requirements = next(i for i, step in enumerate(steps) if "-r requirements.txt" in step)
    assert script < requirements  # pip then finds the pinned torch installed and keeps that build
    assert re.search(r"^TORCH_BUILD \?= auto$", (ROOT / "Makefile").read_text(), re.M)
