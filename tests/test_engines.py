"""The bridge to verl and TRL (course_utils/comparison/engines.py, verl_reward.py) and the GPU configs.

* The verl export: the parquet rows carry every record of every split in the columns of verl's
  RLHFDataset; the exported reward runs on Python's standard library alone and grades every
  prompt as tasks.check does; launch.sh hands verl exactly the overrides ``verl_overrides`` makes,
  whose keys are the ones docs/trl_config_mapping.md gives for each field.
* verl itself (installed from the package index without its GPU extras; CI sets
  COURSE_REQUIRE_VERL=1 so these never skip there): its RLHFDataset loads the export, its custom
  reward loader and reward manager score gold and wrong answers with the exported function, and
  every override is a key of the config Hydra composes from verl's ppo_trainer.yaml.
* TRL: one real GRPOTrainer step on the tiny model, whose reward function sees our records and
  returns the checker's scores.
* configs/accelerate/*.yaml load with accelerate's own loader; configs/cuda.yaml starts from the
  SFT warm-up with cpu_sft's learning settings.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from course_utils import tasks
from course_utils.comparison import engines
from course_utils.config import load_config

ROOT = Path(__file__).resolve().parents[1]
CUDA = ROOT / "configs" / "cuda.yaml"
DOC = ROOT / "docs" / "trl_config_mapping.md"
VERL_PIP = ("pip install --no-deps verl==0.9.1 ray==2.60.0 tensordict==0.10.0 pyvers==0.1.0 ... "
            "(the line in the CI script)")


@pytest.fixture(scope="module")
def cuda_config():
    return load_config(CUDA)


@pytest.fixture(scope="module")
def export(tmp_path_factory, cuda_config):
    """The verl folder for configs/cuda.yaml."""
    out = tmp_path_factory.mktemp("verl") / "export"
    engines.write_verl_export(cuda_config, out, "configs/cuda.yaml")
    return out


def wrong_answers(record: tasks.Prompt) -> list[str]:
    """Answers that pass, fail on form, bury the answer, or are plain wrong (every reward tier)."""
    return [record.target, f"{record.target}.", f"```\n{record.target}\n```", f"Sure! {record.target}",
            record.target.lower(), "", record.prompt, "42", "Yes", "[lemon]"]


# --- the rows ---------------------------------------------------------------------------------

def test_the_parquet_rows_carry_every_record_in_verls_columns(export):
    import pyarrow.parquet as pq

    for split in engines.EXPORT_SPLITS:
        table = pq.read_table(export / f"{split}.parquet")
        assert table.column_names == ["data_source", "prompt", "ability", "reward_model", "extra_info"]
        records = tasks.load_split(split)
        got = table.to_pylist()
        assert len(got) == len(records)
        for i, (row, record) in enumerate(zip(got, records)):
            assert row["data_source"] == f"course_tasks/{record.family}" and row["ability"] == "instruction_following"
            assert row["prompt"] == [{"role": "user", "content": record.prompt}]
            assert row["reward_model"] == {"style": "rule", "ground_truth": record.target}
            info = row["extra_info"]
            assert (info["split"], info["index"], info["id"], info["family"]) == (split, i, record.id, record.family)
            assert engines.record_of(info) == record  # meta included, types kept (json_object's numbers)


# --- the exported reward, on the standard library alone ---------------------------------------

def test_the_exported_reward_needs_only_the_standard_library_and_grades_like_tasks_check(export):
    cases = [(r.to_dict(), answer) for split in engines.EXPORT_SPLITS for r in tasks.load_split(split)
             for answer in wrong_answers(r)]
    # `python -S`: no site-packages at all, so neither course_utils nor anything else installed.
    script = f"""
import importlib.util, json, sys
spec = importlib.util.spec_from_file_location("course_reward", {str(export / engines.REWARD_FILE)!r})
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
out = []
for record, answer in json.load(sys.stdin):
    info = {{"record": json.dumps(record), "index": 0, "num_turns": None}}  # verl adds keys of its own
    out.append([module.compute_score("x", answer, record["target"], info),
                module.compute_score_partial("x", answer, record["target"], info)])
print(json.dumps({{"scores": out, "kit": sorted(m for m in sys.modules if m.startswith(("course_utils", "torch")))}}))
"""
    done = subprocess.run([sys.executable, "-S", "-c", script], input=json.dumps(cases), capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["kit"] == []
    expected = [[{"score": tasks.binary_reward(r, a), "acc": tasks.binary_reward(r, a)},
                 {"score": tasks.partial_credit_reward(r, a), "acc": tasks.binary_reward(r, a)}] for r, a in cases]
    assert result["scores"] == expected
    tiers = {tasks.check(r, a).tier for r, a in cases}
    assert tiers == {"pass", "partial", "plain_wrong", "buried", "nothing"}, tiers  # every tier was exercised


def test_the_reward_refuses_a_row_that_is_not_ours_or_is_mixed_up(export):
    from course_utils.comparison import verl_reward

    record = tasks.load_split("test")[0]
    with pytest.raises(ValueError, match="extra_info has no 'record'"):
        verl_reward.compute_score("openai/gsm8k", "72", "72", {"index": 0})
    with pytest.raises(ValueError, match="is not the record's target"):
        verl_reward.compute_score("x", record.target, "something else", {"record": engines.record_json(record)})


def test_the_copy_of_tasks_py_is_refused_when_tasks_imports_more_of_the_kit(tmp_path, monkeypatch):
    fake = tmp_path / "tasks.py"
    fake.write_text(f'"""doc"""\nfrom pathlib import Path\n{engines.PATHS_IMPORT}from course_utils import rewards\n')
    monkeypatch.setattr(engines.tasks, "__file__", str(fake))
    with pytest.raises(RuntimeError, match="allows only"):
        engines.checker_source()


# --- launch.sh and the mapping doc ------------------------------------------------------------

def doc_verl_keys_by_field() -> dict[str, set[str]]:
    """Our field -> the verl keys of its row in docs/trl_config_mapping.md (``arr.`` expanded)."""
    from test_framework_mapping import tables

    found: dict[str, set[str]] = {}
    for headers, body in tables(DOC.read_text()):
        verl = [i for i, h in enumerate(headers) if h.startswith("verl ")]
        if headers[0] != "ours" or not verl:
            continue
        for row in body:
            keys = {re.sub(r"^arr\.", "actor_rollout_ref.", t.split(":")[0]) for t in re.findall(r"`([^`]+)`", row[verl[0]])}
            for field in re.findall(r"`([a-z_]+)`", row[0]):
                found.setdefault(field, set()).update(keys)
    return found


def test_every_override_uses_the_key_the_mapping_doc_gives_for_its_field(cuda_config):
    by_field = doc_verl_keys_by_field()
    for config in (cuda_config, load_config(CUDA, adaptive_kl=True, group_baseline=True, samples_per_prompt=4)):
        for field, key, _ in engines.verl_overrides(config, "/data", "/model"):
            assert key in by_field.get(field, set()), f"{field} -> {key} is not in the doc's verl column for {field}"


def test_the_doc_header_names_the_verl_release_the_export_targets():
    assert f"verl v{engines.VERL_VERSION}" in DOC.read_text()


def test_launch_sh_hands_verl_exactly_the_overrides(export, tmp_path, cuda_config):
    fake_bin = tmp_path / "bin"
    fake_bin.mkdir()
    (fake_bin / "python3").write_text(f"#!{sys.executable}\nimport json, sys\nprint(json.dumps(sys.argv[1:]))\n")
    (fake_bin / "python3").chmod(0o755)
    env = {**os.environ, "PATH": f"{fake_bin}{os.pathsep}{os.environ['PATH']}", "MODEL": "/models/it's mine"}
    done = subprocess.run(["bash", str(export / engines.LAUNCH_FILE), "trainer.total_training_steps=5"],
                          env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    carried = [f"{k}={v}" for _, k, v in engines.verl_overrides(cuda_config, str(export), "/models/it's mine")]
    engine = [f"{k}={v}" for k, v in engines.verl_engine_settings(cuda_config)]
    assert json.loads(done.stdout) == ["-m", "verl.trainer.main_ppo", *carried, *engine, "trainer.total_training_steps=5"]


def test_the_launch_script_defaults_to_the_presets_model_and_names_what_is_not_carried(export):
    text = (export / engines.LAUNCH_FILE).read_text()
    assert 'MODEL="${MODEL:-runs/sft-cpu/model}"' in text and "is a folder" in text
    assert "max_train_minutes=15.0: verl has no time budget" in text
    hub = engines.launch_script(load_config(CUDA, model="smollm2-135m-instruct"), "x")
    assert 'MODEL="${MODEL:-HuggingFaceTB/SmolLM2-135M-Instruct}"' in hub and "is a folder" not in hub


def test_a_minibatch_verl_cannot_express_is_refused(cuda_config):
    config = load_config(CUDA, samples_per_prompt=4, batch_size=64, num_minibatches=8)  # 16 prompts / 8: fine
    assert engines.verl_minibatch(config) == 2
    with pytest.raises(ValueError, match="divisible by num_minibatches"):
        engines.verl_minibatch(load_config(CUDA, samples_per_prompt=16, batch_size=64, num_minibatches=8))


# --- the command line: one line for bad input, nothing lost on disk ----------------------------

def run_export(capsys, monkeypatch, *argv) -> tuple[int, str]:
    from course_utils import __main__ as cli

    monkeypatch.setitem(cli.COMMANDS, "export", ("export for another engine", engines.main))
    with pytest.raises(SystemExit) as stopped:
        cli.main(["export", *argv])
    return stopped.value.code, capsys.readouterr().err


def test_the_export_refuses_a_folder_holding_other_files_and_leaves_them(capsys, monkeypatch, tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    code, err = run_export(capsys, monkeypatch, "verl", "--out", str(tmp_path))
    assert code == 2 and "holds files this export did not write" in err and err.count("\n") == 1, err
    assert [p.name for p in tmp_path.iterdir()] == ["notes.txt"] and (tmp_path / "notes.txt").read_text() == "mine"


def test_the_export_refuses_a_reward_it_cannot_carry(capsys, monkeypatch, tmp_path):
    code, err = run_export(capsys, monkeypatch, "verl", "--out", str(tmp_path / "x"), "--set", "reward=learned",
                           "reward_model_path=default")
    assert code == 2 and "Fix: --set reward=checker_binary" in err and err.count("\n") == 1, err
    assert not (tmp_path / "x").exists() and list(tmp_path.iterdir()) == []  # no staging folder left behind


def test_exporting_again_replaces_the_export_and_keeps_verls_checkpoints(tmp_path, cuda_config):
    out = tmp_path / "export"
    engines.write_verl_export(cuda_config, out)
    (out / "checkpoints").mkdir()
    (out / "checkpoints" / "step1").write_text("verl's")
    manifest = engines.write_verl_export(load_config(CUDA, reward="checker_partial"), out)
    assert "compute_score_partial" in (out / engines.LAUNCH_FILE).read_text()
    assert (out / "checkpoints" / "step1").read_text() == "verl's"
    assert json.loads((out / engines.MANIFEST_FILE).read_text()) == manifest
    assert manifest["files"][engines.CHECKER_FILE] == engines.sha256((out / engines.CHECKER_FILE).read_text())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["export"]


# --- verl itself ------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def verl():
    try:
        import verl  # noqa: F401  (pulls in ray and tensordict, not vllm or flash-attn)
    except ImportError as error:
        message = f"verl is not installed ({error}); {VERL_PIP}"
        if os.environ.get("COURSE_REQUIRE_VERL") == "1":  # CI sets this: never skipped there
            pytest.fail(message)
        pytest.skip(message)
    return verl


def compose(verl, overrides: list[str]):
    """verl's PPO config, composed by Hydra from ppo_trainer.yaml and its defaults, as main_ppo does."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    with initialize_config_dir(config_dir=str(Path(verl.__file__).parent / "trainer" / "config"), version_base=None):
        return hydra_compose("ppo_trainer", overrides=overrides)


def export_overrides(config, export: Path, model: str) -> list[str]:
    return [f"{k}={v}" for _, k, v in engines.verl_overrides(config, str(export), model)] + \
           [f"{k}={v}" for k, v in engines.verl_engine_settings(config)]


def test_every_override_is_a_key_of_verls_composed_config(verl, export, cuda_config, tiny_model_dir):
    from omegaconf import OmegaConf

    with pytest.raises(Exception, match="Could not override 'data.no_such_key'"):  # the check can fail
        compose(verl, ["data.no_such_key=1"])
    for config in (cuda_config, load_config(CUDA, adaptive_kl=True, group_baseline=True, samples_per_prompt=4,
                                            lr_schedule="linear", reward="checker_partial")):
        overrides = export_overrides(config, export, str(tiny_model_dir))
        cfg = compose(verl, overrides)
        for item in overrides:
            key, value = item.split("=", 1)
            got = OmegaConf.select(cfg, key)
            got = OmegaConf.to_container(got) if OmegaConf.is_config(got) else got
            assert engines.hydra_value(got) == value, (key, got, value)


def test_verls_dataset_loads_the_export(verl, export, cuda_config, tiny_model_dir, tiny_tokenizer):
    from verl.trainer.ppo.utils import create_rl_dataset

    from course_utils.rollout import render_prompts

    cfg = compose(verl, [*export_overrides(cuda_config, export, str(tiny_model_dir)),
                         "data.filter_overlong_prompts=true", "data.filter_overlong_prompts_workers=1"])
    for files, split in ((cfg.data.train_files, "train"), (cfg.data.val_files, "test")):
        dataset = create_rl_dataset(files, cfg.data, tiny_tokenizer, None, is_train=split == "train")
        records = tasks.load_split(split)
        assert len(dataset) == len(records)  # every prompt fits data.max_prompt_length (verl's own filter)
        for i in (0, 1, len(records) - 1):
            item, record = dataset[i], records[i]
            assert item["raw_prompt"] == [{"role": "user", "content": record.prompt}]
            assert item["reward_model"]["ground_truth"] == record.target and item["index"] == i
            assert engines.record_of(item["extra_info"]) == record
            rendered = tiny_tokenizer.apply_chat_template(item["raw_prompt"], tokenize=False, add_generation_prompt=True)
            assert rendered == render_prompts(tiny_tokenizer, [record.prompt])[0]  # the prompt our rollouts see


def test_verls_reward_loader_and_manager_score_gold_and_wrong_answers(verl, export, cuda_config, tiny_model_dir,
                                                                      tiny_tokenizer):
    import numpy as np
    import torch
    from verl import DataProto
    from verl.trainer.ppo.reward import get_custom_reward_fn, load_reward_manager

    records = tasks.load_split("test")[:10]
    rows = engines.rows(records)
    for reward, fn_name in engines.REWARD_FUNCTIONS.items():
        cfg = compose(verl, export_overrides(load_config(CUDA, reward=reward), export, str(tiny_model_dir)))
        assert cfg.reward.custom_reward_function.name == fn_name
        score = get_custom_reward_fn(cfg)  # verl loads the exported file by path
        expect = tasks.binary_reward if reward == "checker_binary" else tasks.partial_credit_reward
        for record, row in zip(records, rows):
            for answer in wrong_answers(record):
                got = score(data_source=row["data_source"], solution_str=answer,
                            ground_truth=row["reward_model"]["ground_truth"], extra_info=dict(row["extra_info"]))
                assert got == {"score": expect(record, answer), "acc": tasks.binary_reward(record, answer)}
        # The reward manager decodes the response tokens itself (special tokens dropped) before scoring.
        manager = load_reward_manager(cfg, tiny_tokenizer)
        eos = tiny_tokenizer.eos_token_id
        for record, row in zip(records[:3], rows[:3]):
            for answer in (record.target, "no idea"):
                ids = tiny_tokenizer(answer, add_special_tokens=False)["input_ids"] + [eos]
                prompt = torch.ones(1, 4, dtype=torch.long)
                responses = torch.tensor([ids + [eos] * 3])  # padded after the EOS, masked out
                mask = torch.cat([torch.ones(1, 4 + len(ids)), torch.zeros(1, 3)], 1).long()
                data = DataProto.from_dict(tensors={"prompts": prompt, "responses": responses, "attention_mask": mask},
                                           non_tensors={k: np.array([row[k]], dtype=object)
                                                        for k in ("data_source", "reward_model", "extra_info")})
                result = manager.loop.run_until_complete(manager.run_single(data))
                assert result["reward_score"] == expect(record, answer) and (answer != record.target) ^ (
                    result["reward_extra_info"]["acc"] == 1.0)


# --- TRL's GRPOTrainer --------------------------------------------------------------------------

def test_the_grpo_reward_functions_score_both_completion_forms():
    records = tasks.load_split("validation")[:10]
    info = [r["extra_info"] for r in engines.rows(records)]
    for answer_of in (lambda r: r.target, lambda r: f"{r.target}.", lambda r: "nope"):
        texts = [answer_of(r) for r in records]
        chats = [[{"role": "assistant", "content": t}] for t in texts]
        binary = [tasks.binary_reward(r, t) for r, t in zip(records, texts)]
        partial = [tasks.partial_credit_reward(r, t) for r, t in zip(records, texts)]
        for completions in (texts, chats):
            assert engines.checker_binary_reward(None, completions, info, trainer_state=None) == binary
            assert engines.checker_partial_reward(None, completions, info) == partial
    assert sum(engines.checker_binary_reward(None, [r.target for r in records], info)) == len(records)


def test_one_grpo_step_on_the_tiny_model_scores_our_records_with_the_checker(tmp_path, tiny_model_dir):
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    from course_utils.comparison.trl_adapter import trl_tokenizer

    records = tasks.load_split("train")[:2]
    seen = []

    def checker(prompts, completions, extra_info, **kwargs):
        rewards = engines.checker_binary_reward(prompts, completions, extra_info, **kwargs)
        seen.append((prompts, completions, extra_info, rewards))
        return rewards

    # A batch of 4 completions: the 2 prompts, 2 generations each.
    args = GRPOConfig(output_dir=str(tmp_path), per_device_train_batch_size=4, num_generations=2,
                      max_completion_length=4, max_steps=1, use_cpu=True, report_to="none", save_strategy="no",
                      logging_steps=1, bf16=False, seed=0, dataloader_num_workers=0)
    trainer = GRPOTrainer(model=str(tiny_model_dir), reward_funcs=checker, args=args,
                          train_dataset=Dataset.from_list(engines.rows(records)),
                          processing_class=trl_tokenizer(tiny_model_dir))
    trainer.train()
    assert trainer.state.global_step == 1 and len(seen) == 1
    prompts, completions, extra_info, rewards = seen[0]
    got = [engines.record_of(info) for info in extra_info]
    assert sorted(r.id for r in got) == sorted([r.id for r in records] * 2)  # 2 prompts x 2 generations
    assert [p[-1]["content"] for p in prompts] == [r.prompt for r in got]
    assert rewards == [tasks.binary_reward(r, engines.completion_text(c)) for r, c in zip(got, completions)]
    logged = trainer.state.log_history[0]
    assert logged["rewards/checker/mean"] == sum(rewards) / len(rewards)


# --- the GPU configs -----------------------------------------------------------------------------

@pytest.mark.parametrize("name, kind, processes", [("single_gpu", "NO", 1), ("multi_gpu", "MULTI_GPU", 2),
                                                    ("deepspeed_zero2", "DEEPSPEED", 2)])
def test_the_accelerate_configs_load_with_accelerates_own_loader(name, kind, processes):
    from accelerate.commands.config.config_args import load_config_from_file

    config = load_config_from_file(str(ROOT / "configs" / "accelerate" / f"{name}.yaml"))
    assert (config.distributed_type, config.num_processes, config.mixed_precision, config.use_cpu) == (
        kind, processes, "bf16", False)
    if kind == "DEEPSPEED":
        assert config.deepspeed_config["zero_stage"] == 2


def test_the_cuda_preset_runs_the_pipeline_from_the_sft_warm_up():
    cuda, cpu_sft = load_config(CUDA), load_config(ROOT / "configs" / "cpu_sft.yaml")
    learning = ("model", "reward", "lora_rank", "lora_alpha", "learning_rate", "kl_coef", "ent_coef",
                "temperature", "max_new_tokens", "eval_prompts", "eval_every", "total_updates", "max_train_minutes")
    assert {f: getattr(cuda, f) for f in learning} == {f: getattr(cpu_sft, f) for f in learning}
    assert (cuda.device, cuda.batch_size, cuda.num_minibatches, cuda.ppo_epochs) == ("cuda", 64, 4, 2)
    # bf16 on a GPU: the old log-probs must come from a forward (the trainer refuses "generation").
    assert cuda.old_logprobs_from == "forward" and cuda.log_sampler_kl
