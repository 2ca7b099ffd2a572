"""The bridge to the engines learners move to: our tasks and checker, in the form verl and TRL take.

verl 0.9.1 (PPO on GPUs with Ray and vLLM) reads prompts from parquet files and scores responses
with a Python function named in its config. ``python -m course_utils export verl --out DIR``
writes a folder that carries one of our presets over::

    DIR/train.parquet, validation.parquet, test.parquet, test_unseen.parquet
        one row per prompt, in the columns of verl's ``RLHFDataset`` (as verl's own
        examples/data_preprocess/gsm8k.py writes them):
        data_source   "course_tasks/<family>" (verl's validation metrics are grouped by it)
        prompt        the chat messages, [{"role": "user", "content": <the prompt>}]
        ability       "instruction_following"
        reward_model  {"style": "rule", "ground_truth": <the target>}
        extra_info    {"split", "index", "id", "family", "record": the tasks.Prompt as JSON}
    DIR/course_reward.py   verl's custom reward (``comparison/verl_reward.py``, copied)
    DIR/course_tasks.py    the checker it calls: course_utils/tasks.py, copied (why a copy: see
                           verl_reward's docstring)
    DIR/launch.sh          ``python3 -m verl.trainer.main_ppo`` with Hydra overrides carrying the
                           preset's settings (``verl_overrides``; each key is the one
                           docs/trl_config_mapping.md gives for that field), then the settings an
                           engine needs that our config has no field for (``VERL_ENGINE_SETTINGS``)
    DIR/export_manifest.json   what was written, from which preset, and tasks.py's sha256

TRL's ``GRPOTrainer`` (TRL's maintained online-RL trainer) takes Python reward functions called as
``f(prompts=..., completions=..., **dataset_columns)``: ``checker_binary_reward`` and
``checker_partial_reward`` score its completions with ``tasks.binary_reward`` and
``tasks.partial_credit_reward`` on the records of the same rows (``trl_dataset``).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import shutil
import tempfile
from pathlib import Path

from course_utils import tasks
from course_utils.comparison import verl_reward

VERL_VERSION = "0.9.1"
DATA_SOURCE = "course_tasks"
ABILITY = "instruction_following"
EXPORT_SPLITS = (*tasks.SPLITS, tasks.UNSEEN_SPLIT)
REWARD_FILE, CHECKER_FILE, LAUNCH_FILE, MANIFEST_FILE = ("course_reward.py", verl_reward.CHECKER_FILE,
                                                         "launch.sh", "export_manifest.json")
REWARD_FUNCTIONS = {"checker_binary": "compute_score", "checker_partial": "compute_score_partial"}
MAX_PROMPT_TOKENS = 256
"""verl's ``data.max_prompt_length``: every exported prompt, chat template included, is far shorter
with SmolLM2's or Qwen2.5's template (tests/test_engines.py checks it with verl's own filter)."""
HUB_IDS = {"smollm2-135m-instruct": "HuggingFaceTB/SmolLM2-135M-Instruct",
           "smollm2-135m-instruct-hub": "HuggingFaceTB/SmolLM2-135M-Instruct",
           "qwen2.5-0.5b-instruct": "Qwen/Qwen2.5-0.5B-Instruct"}
"""Our model presets as verl loads them on a GPU machine: the hub originals (our offline default
is a de-quantized GGUF copy of the first, a laptop convenience)."""

VERL_ENGINE_SETTINGS = [
    ("actor_rollout_ref.rollout.name", "vllm"),  # the rollout engine (verl's quick start uses vLLM)
    ("actor_rollout_ref.rollout.tensor_model_parallel_size", "1"),
    ("actor_rollout_ref.rollout.gpu_memory_utilization", "0.4"),  # vLLM's share; training takes the rest
    ("trainer.n_gpus_per_node", "1"),
    ("trainer.nnodes", "1"),
    ("trainer.logger", "[console]"),  # verl's default adds wandb, which needs an account
    ("trainer.project_name", "course_utils"),
    ("data.max_prompt_length", str(MAX_PROMPT_TOKENS)),
]
"""What verl needs that our config has no field for, sized for one 24 GB GPU and a model up to
0.5B parameters (the numbers of verl's own quick start, PPO on Qwen2.5-0.5B on one GPU)."""


# --------------------------------------------------------------------------------------------
# Rows: one per prompt, for verl's parquet files and TRL's dataset
# --------------------------------------------------------------------------------------------


def record_json(record: tasks.Prompt) -> str:
    """The whole task record as one JSON string (a parquet struct would merge the families' meta
    keys into one schema and hand every row the others' keys as nulls)."""
    return json.dumps(record.to_dict(), sort_keys=True, ensure_ascii=False)


def rows(records: list[tasks.Prompt]) -> list[dict]:
    """verl's RL rows (the columns of verl's RLHFDataset) for task records, in order."""
    return [{"data_source": f"{DATA_SOURCE}/{r.family}",
             "prompt": [{"role": "user", "content": r.prompt}],
             "ability": ABILITY,
             "reward_model": {"style": "rule", "ground_truth": r.target},
             "extra_info": {"split": r.split, "index": i, "id": r.id, "family": r.family, "record": record_json(r)}}
            for i, r in enumerate(records)]


def record_of(extra_info: dict) -> tasks.Prompt:
    """The task record a row carries (``extra_info["record"]``)."""
    return tasks.Prompt.from_dict(json.loads(extra_info["record"]))


def write_parquet(records: list[tasks.Prompt], path: Path) -> int:
    """One split as a parquet file of ``rows``; returns the number of rows."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist(rows(records)), path)
    return len(records)


# --------------------------------------------------------------------------------------------
# TRL: reward functions for GRPOTrainer
# --------------------------------------------------------------------------------------------


def completion_text(completion) -> str:
    """A GRPOTrainer completion as text: a string (plain prompts), or the assistant's message list
    (chat prompts: ``[{"role": "assistant", "content": ...}]``)."""
    if isinstance(completion, str):
        return completion
    return completion[-1]["content"]


def checker_binary_reward(prompts, completions, extra_info, **kwargs) -> list[float]:
    """GRPOTrainer reward: ``tasks.binary_reward`` of each completion against its row's record.
    ``extra_info`` is the dataset column of that name (TRL passes every column by name)."""
    return [tasks.binary_reward(record_of(info), completion_text(c)) for c, info in zip(completions, extra_info)]


def checker_partial_reward(prompts, completions, extra_info, **kwargs) -> list[float]:
    """GRPOTrainer reward: ``tasks.partial_credit_reward`` of each completion against its record."""
    return [tasks.partial_credit_reward(record_of(info), completion_text(c))
            for c, info in zip(completions, extra_info)]


def trl_dataset(split: str = "train", data_dir=None):
    """A split as GRPOTrainer's ``train_dataset``: the same rows as the verl export (``prompt``
    as chat messages; ``extra_info`` reaches the reward functions)."""
    from datasets import Dataset

    return Dataset.from_list(rows(tasks.load_split(split, data_dir)))


# --------------------------------------------------------------------------------------------
# verl: our config as Hydra overrides
# --------------------------------------------------------------------------------------------


def hydra_value(value) -> str:
    """A Python value as a Hydra override value: true/false, numbers, [a,b] lists, plain strings."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(hydra_value(v) for v in value) + "]"
    return str(value)


def verl_model(name: str) -> str:
    """Our ``model`` as verl loads it: a preset name becomes its hub id; a folder or a hub id stays
    as written (a relative folder, such as the SFT warm-up's, is relative to where verl starts)."""
    return HUB_IDS.get(name, name)


def verl_minibatch(config) -> int:
    """Prompts per PPO minibatch: verl counts ``ppo_mini_batch_size`` in prompts (it multiplies
    by ``rollout.n``), we count minibatches per batch of episodes."""
    prompts = config.batch_size // config.samples_per_prompt
    if prompts % config.num_minibatches:
        raise ValueError(f"verl counts minibatches in prompts: batch_size / samples_per_prompt = {prompts} must be "
                         f"divisible by num_minibatches = {config.num_minibatches}; e.g. --set num_minibatches=1")
    return prompts // config.num_minibatches


def verl_overrides(config, data_dir: str, model: str) -> list[tuple[str, str, str]]:
    """(our field, verl key, value) for every setting of ``config`` that verl 0.9.1 has, with the
    key docs/trl_config_mapping.md gives for that field. ``data_dir`` is where the exported files
    lie and ``model`` the starting model, as verl will see them (launch.sh passes "$HERE" and
    "$MODEL"). The fields verl has no setting for are in ``not_carried``."""
    arr, lr = "actor_rollout_ref", config.learning_rate
    out = [("model", f"{arr}.model.path", model), ("model", "critic.model.path", model),
           ("lora_rank", f"{arr}.model.lora_rank", config.lora_rank),
           ("lora_alpha", f"{arr}.model.lora_alpha", config.lora_alpha),
           ("lora_target_modules", f"{arr}.model.target_modules", config.lora_target_modules),
           ("reward", "reward.custom_reward_function.path", f"{data_dir}/{REWARD_FILE}"),
           ("reward", "reward.custom_reward_function.name", REWARD_FUNCTIONS[config.reward]),
           ("device", "trainer.device", "cuda"),
           ("batch_size", "data.train_batch_size", config.batch_size // config.samples_per_prompt),
           ("samples_per_prompt", f"{arr}.rollout.n", config.samples_per_prompt),
           ("num_minibatches", f"{arr}.actor.ppo_mini_batch_size", verl_minibatch(config)),
           ("num_minibatches", "critic.ppo_mini_batch_size", verl_minibatch(config)),
           ("max_new_tokens", "data.max_response_length", config.max_new_tokens),
           ("temperature", f"{arr}.rollout.temperature", config.temperature),
           ("train_split", "data.train_files", f"{data_dir}/{config.train_split}.parquet"),
           ("eval_split", "data.val_files", f"{data_dir}/{config.eval_split}.parquet"),
           ("total_updates", "trainer.total_training_steps", config.total_updates),
           ("ppo_epochs", f"{arr}.actor.ppo_epochs", config.ppo_epochs),
           ("learning_rate", f"{arr}.actor.optim.lr", lr), ("learning_rate", "critic.optim.lr", lr),
           # Ours is Adam; verl's is AdamW with weight decay 0.01.
           ("learning_rate", f"{arr}.actor.optim.weight_decay", 0.0),
           ("learning_rate", "critic.optim.weight_decay", 0.0)]
    if config.lr_schedule == "constant":  # verl has constant and cosine; "linear" is in not_carried
        out += [("lr_schedule", f"{arr}.actor.optim.lr_scheduler_type", "constant"),
                ("lr_schedule", "critic.optim.lr_scheduler_type", "constant")]
    out += [("max_grad_norm", f"{arr}.actor.optim.clip_grad", config.max_grad_norm),
            ("max_grad_norm", "critic.optim.clip_grad", config.max_grad_norm),
            ("cliprange", f"{arr}.actor.clip_ratio", config.cliprange),
            ("cliprange_value", "critic.cliprange_value", config.cliprange_value),
            ("ent_coef", f"{arr}.actor.entropy_coeff", config.ent_coef),
            ("gamma", "algorithm.gamma", config.gamma), ("lam", "algorithm.lam", config.lam),
            ("group_baseline", "algorithm.adv_estimator", "rloo" if config.group_baseline else "gae"),
            ("kl_coef", "algorithm.use_kl_in_reward", config.kl_coef > 0),
            ("kl_coef", "algorithm.kl_ctrl.kl_coef", config.kl_coef),
            ("kl_estimator", "algorithm.kl_penalty", config.kl_estimator),
            ("adaptive_kl", "algorithm.kl_ctrl.type", "adaptive" if config.adaptive_kl else "fixed")]
    if config.adaptive_kl:  # kl_target is in other units there: not_carried says what to set
        out.append(("kl_horizon", "algorithm.kl_ctrl.horizon", config.kl_horizon))
    out += [("run_name", "trainer.experiment_name", config.run_name),
            ("output_dir", "trainer.default_local_dir", f"{data_dir}/checkpoints"),
            ("seed", "data.seed", config.seed),
            ("eval_every", "trainer.test_freq", config.eval_every),
            ("eval_every", "trainer.val_before_train", True),  # we evaluate the starting policy too
            ("num_sample_prompts", "trainer.log_val_generations", config.num_sample_prompts),
            ("save_every", "trainer.save_freq", config.save_every),
            # We keep one checkpoint (the last good one); verl keeps every one unless told.
            ("save_every", "trainer.max_actor_ckpt_to_keep", 1), ("save_every", "trainer.max_critic_ckpt_to_keep", 1)]
    return [(name, key, hydra_value(value)) for name, key, value in out]


def verl_engine_settings(config) -> list[tuple[str, str]]:
    """``VERL_ENGINE_SETTINGS`` plus the micro-batch sizes: how many sequences one GPU runs in a
    forward/backward at once (a memory knob; the optimizer step still sees the whole minibatch)."""
    micro = math.gcd(verl_minibatch(config) * config.samples_per_prompt, 8)
    return [*VERL_ENGINE_SETTINGS,
            ("actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu", str(micro)),
            ("critic.ppo_micro_batch_size_per_gpu", str(micro)),
            ("actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu", "16"),
            ("actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu", "16")]


def not_carried(config) -> list[str]:
    """What of ``config`` verl 0.9.1 has no setting for, one line each (launch.sh prints them as
    comments; docs/trl_config_mapping.md has the same "—" cells)."""
    notes = [f"max_train_minutes={config.max_train_minutes}: verl has no time budget; "
             f"trainer.total_training_steps={config.total_updates} ends the run",
             f"vf_coef={config.vf_coef}: verl's critic is a separate model with its own optimizer",
             "stop_* rules and max_rollout_age: verl has no stop rules; it stops at total_training_steps",
             "old_logprobs_from, log_sampler_kl, sampling_dtype, packed_cpu_linears, decode_loop, threads: our CPU "
             "sampler's settings; verl samples with vLLM in bfloat16 and recomputes old log-probs with the actor"]
    if config.device != "cuda":
        notes.append(f"device={config.device}: verl runs on CUDA GPUs, so trainer.device=cuda")
    if config.target_kl:
        notes.append(f"target_kl={config.target_kl}: verl has no KL early stop inside an update")
    if config.lr_schedule == "linear":
        notes.append("lr_schedule=linear: verl 0.9.1 has constant and cosine only; verl's default (constant) is used")
    if config.adaptive_kl:
        notes.append(f"kl_target={config.kl_target} is nats per response here, per token in verl: set "
                     "algorithm.kl_ctrl.target_kl to it divided by a typical response length")
    if config.whiten_rewards or not config.whiten_advantages or config.missing_eos_penalty:
        notes.append("whiten_rewards / whiten_advantages=false / missing_eos_penalty: verl always whitens GAE "
                     "advantages and has neither of the others")
    if config.group_baseline:
        notes.append("group_baseline: verl's rloo estimator drops the critic; ours keeps GAE with the value head")
    if config.task_families or config.prompt_sampling != "shuffled":
        notes.append("task_families / prompt_sampling: the parquet files hold every family, drawn shuffled")
    if config.eval_prompts < tasks.SPLIT_SIZES.get(config.eval_split, 100):
        notes.append(f"eval_prompts={config.eval_prompts}: verl evaluates the whole {config.eval_split} file")
    return notes


# --------------------------------------------------------------------------------------------
# The export folder
# --------------------------------------------------------------------------------------------

PATHS_IMPORT = "from course_utils.machinery.paths import DATA_DIR\n"
PATHS_STANDIN = "DATA_DIR = Path(__file__).parent  # in the kit: course_utils.machinery.paths.DATA_DIR\n"


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def checker_source() -> str:
    """``course_tasks.py``: tasks.py's source with a header, its one import from the kit (the
    data folder, which the checker never reads) replaced by a stand-in. Refuses a tasks.py that
    imports anything else from the kit: the copy must run on the standard library alone."""
    import ast

    source = Path(tasks.__file__).read_text(encoding="utf-8")
    kit_imports = [ast.get_source_segment(source, node) for node in ast.walk(ast.parse(source))
                   if isinstance(node, (ast.Import, ast.ImportFrom)) and "course_utils" in ast.dump(node)]
    if kit_imports != [PATHS_IMPORT.strip()]:
        raise RuntimeError(f"course_utils/tasks.py imports {kit_imports} from the kit; the verl export copies it "
                           f"and allows only `{PATHS_IMPORT.strip()}`")
    header = (f"# {CHECKER_FILE}: a copy of course_utils/tasks.py (sha256 {sha256(source)}), written by\n"
              "# `python -m course_utils export verl` for verl's reward (course_reward.py). Change tasks.py and\n"
              "# export again rather than this file. One line differs: DATA_DIR (the data folder, unused here).\n")
    return header + source.replace(PATHS_IMPORT, PATHS_STANDIN)


def bash_quoted(value: str) -> str:
    """A double-quoted bash word that keeps ``$HERE`` and ``$MODEL`` live and nothing else."""
    text = value.replace("\\", "\\\\").replace('"', '\\"').replace("`", "\\`").replace("$", "\\$")
    return '"' + text.replace("\\$HERE", "$HERE").replace("\\$MODEL", "$MODEL") + '"'


def launch_script(config, config_path: str) -> str:
    """launch.sh: verl's PPO entry point with the preset's settings as Hydra overrides."""
    model = verl_model(config.model)
    lines = ["#!/usr/bin/env bash",
             f"# PPO with verl {VERL_VERSION} on the course's tasks, carrying the preset {config_path}",
             "# (written by `python -m course_utils export verl`; the keys: docs/trl_config_mapping.md).",
             "# On a machine with a CUDA GPU (one 24 GB GPU is enough for models up to 0.5B):",
             f"#   pip install 'verl[vllm]=={VERL_VERSION}'  # verl with its GPU extras (vLLM, flash-attn, their torch)",
             "#   bash launch.sh                           # more Hydra overrides after it win, e.g.",
             "#   bash launch.sh trainer.total_training_steps=5",
             f"#   MODEL=<folder or hub id> bash launch.sh  # another starting model (default {model})"]
    if model not in HUB_IDS.values() and model.count("/") != 1:  # not owner/name: a folder
        lines.append(f"# {model} is a folder, relative to where you start launch.sh: copy it to the GPU machine "
                     "or train it there (`python -m course_utils sft --device cuda`).")
    lines += ["# Not carried (verl has no setting for them):", *[f"#   - {note}" for note in not_carried(config)],
              "set -euo pipefail", 'HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"',
              f'MODEL="${{MODEL:-{model}}}"', "ARGS=(", "  # our settings (field: verl key)"]
    carried = verl_overrides(config, "$HERE", "$MODEL")
    lines += [f"  {key}={bash_quoted(value)}  # {name}" for name, key, value in carried]
    lines.append("  # what verl needs that our config has no field for (one GPU)")
    lines += [f"  {key}={bash_quoted(value)}" for key, value in verl_engine_settings(config)]
    lines += [")", 'exec python3 -m verl.trainer.main_ppo "${ARGS[@]}" "$@"', ""]
    return "\n".join(lines)


def check_out_folder(out: Path) -> None:
    """Refuse to write into a folder that holds files an export did not write (nothing is lost)."""
    if out.exists() and not out.is_dir():
        raise NotADirectoryError(f"--out {out} is a file; choose a new folder")
    if out.is_dir() and any(out.iterdir()) and not (out / MANIFEST_FILE).is_file():
        raise ValueError(f"--out {out} holds files this export did not write; choose a new or empty folder")


def write_verl_export(config, out, config_path: str = "") -> dict:
    """Write the verl folder (module docstring) into ``out`` and return its manifest. The files are
    written into a temporary folder beside ``out`` first and moved in at the end, so a failure
    leaves ``out`` as it was; an earlier export's files are replaced, anything else is refused."""
    if config.reward not in REWARD_FUNCTIONS:
        raise ValueError(f"the verl export carries the checker rewards ({', '.join(REWARD_FUNCTIONS)}); the preset has "
                         f"reward={config.reward}. Fix: --set reward=checker_binary")
    out = Path(out)
    check_out_folder(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{out.name}-", dir=out.parent))
    try:
        counts = {split: write_parquet(tasks.load_split(split), staging / f"{split}.parquet")
                  for split in EXPORT_SPLITS}
        texts = {REWARD_FILE: Path(verl_reward.__file__).read_text(encoding="utf-8"),
                 CHECKER_FILE: checker_source(), LAUNCH_FILE: launch_script(config, config_path)}
        for name, text in texts.items():
            (staging / name).write_text(text, encoding="utf-8")
        (staging / LAUNCH_FILE).chmod(0o755)
        manifest = {"engine": "verl", "verl_version": VERL_VERSION, "config": config_path, "settings": config.to_dict(),
                    "rows": counts, "tasks_py_sha256": sha256(Path(tasks.__file__).read_text(encoding="utf-8")),
                    "files": {name: sha256(text) for name, text in texts.items()}}
        (staging / MANIFEST_FILE).write_text(json.dumps(manifest, indent=1) + "\n", encoding="utf-8")
        out.mkdir(exist_ok=True)
        for path in sorted(staging.iterdir(), key=lambda p: p.name == MANIFEST_FILE):  # the manifest last
            os.replace(path, out / path.name)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return manifest


def main(argv: list[str] | None = None) -> dict:
    """``python -m course_utils export verl --out DIR [--config PRESET] [--set FIELD=VALUE ...]``."""
    import yaml

    from course_utils.config import load_config
    from course_utils.machinery.paths import CONFIGS_DIR

    parser = argparse.ArgumentParser(prog="python -m course_utils export",
                                     description="Write the tasks, the checker and a preset for another engine.")
    parser.add_argument("engine", choices=["verl"], help="verl: parquet data, a reward function, launch.sh")
    parser.add_argument("--out", required=True, help="a new or empty folder (or an earlier export, replaced)")
    parser.add_argument("--config", default=str(CONFIGS_DIR / "cuda.yaml"), help="the preset to carry over")
    parser.add_argument("--set", nargs="*", default=[], metavar="FIELD=VALUE", help="override preset fields")
    args = parser.parse_args(argv)
    overrides = {key: yaml.safe_load(value) for key, _, value in (item.partition("=") for item in args.set)}
    config = load_config(args.config, **overrides)
    manifest = write_verl_export(config, args.out, args.config)
    print(f"wrote {args.out}: " + ", ".join(f"{split}.parquet ({n} rows)" for split, n in manifest["rows"].items())
          + f", {REWARD_FILE}, {CHECKER_FILE}, {LAUNCH_FILE}")
    print(f"on a CUDA machine with verl {VERL_VERSION}: bash {Path(args.out) / LAUNCH_FILE}")
    return manifest
