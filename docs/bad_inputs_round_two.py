"""Try plausible bad inputs through every command and write what each answers (issue 31).

    HF_HUB_OFFLINE=1 python docs/bad_inputs_round_two.py > docs/bad_inputs_round_two.table.md

Each case runs ``python -m course_utils ...`` in this process (one import of torch for all of
them) with stdout and stderr captured; the answer is the last line of stderr and the exit code.
A case that has not answered within ``LIMIT_S`` seconds is stopped and reported as such: a bad
input should be refused before anything long starts. Everything a case writes goes into a
temporary folder; the repository is not touched.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import signal
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
LIMIT_S = 240
SMOKE = "configs/smoke.yaml"


class TookTooLong(Exception):
    pass


def cases(tmp: Path) -> list[tuple[str, list[str]]]:
    """(what a learner or instructor did, the command line) for every case."""
    a_file = tmp / "a_file.txt"
    a_file.write_text("not a folder")
    empty = tmp / "empty_dir"
    empty.mkdir()
    broken_nb = tmp / "broken.ipynb"
    broken_nb.write_text('{"cells": [')
    dirty_run = tmp / "runs" / "smoke"
    dirty_run.mkdir(parents=True)
    (dirty_run / "metrics.jsonl").write_text('{"update": 1}\n')
    out = f"output_dir={tmp / 'runs'}"
    return [
        ("ppo: the preset named without .yaml", ["ppo", "--config", "configs/cpu"]),
        ("ppo: a Markdown file given as the config", ["ppo", "--config", "README.md"]),
        ("ppo: --set with no value", ["ppo", "--config", SMOKE, "--set", "total_updates"]),
        ("ppo: a word where a number goes", ["ppo", "--config", SMOKE, "--set", out, "seed=abc"]),
        ("ppo: an empty run_name", ["ppo", "--config", SMOKE, "--set", out, "run_name= "]),
        ("ppo: a model name that does not exist", ["ppo", "--config", SMOKE, "--set", f"output_dir={tmp / 'm'}",
                                                   "model=gpt-5"]),
        ("ppo: output_dir is a file", ["ppo", "--config", SMOKE, "--set", f"output_dir={a_file}"]),
        ("ppo: device=tpu", ["ppo", "--config", SMOKE, "--set", f"output_dir={tmp / 'd'}", "device=tpu"]),
        ("ppo: the cuda preset on a machine without CUDA", ["ppo", "--config", "configs/cuda.yaml", "--set",
                                                             f"output_dir={tmp / 'c'}"]),
        ("ppo: the learned reward with no model there", ["ppo", "--config", SMOKE, "--set", f"output_dir={tmp / 'r'}",
                                                        "reward=learned", f"reward_model_path={tmp / 'no_rm'}"]),
        ("ppo: LoRA on layers the model lacks", ["ppo", "--config", SMOKE, "--set", f"output_dir={tmp / 'l'}",
                                                "lora_target_modules=[attn]"]),
        ("ppo: eval_every=0", ["ppo", "--config", SMOKE, "--set", out, "eval_every=0"]),
        ("ppo: temperature=0 (greedy sampling for PPO)", ["ppo", "--config", SMOKE, "--set", out, "temperature=0"]),
        ("ppo: --resume and --resume-or-start together", ["ppo", "--config", SMOKE, "--resume", "--resume-or-start"]),
        ("ppo: a misspelt option", ["ppo", "--config", SMOKE, "--sett", "seed=1"]),
        ("ppo: samples_per_prompt that does not divide the batch", ["ppo", "--config", SMOKE, "--set", out,
                                                                   "samples_per_prompt=3"]),
        ("ppo: bfloat16 sampling with the packed path off", ["ppo", "--config", SMOKE, "--set",
                                                             f"output_dir={tmp / 'b'}", "sampling_dtype=bfloat16",
                                                             "packed_cpu_linears=false"]),
        ("ppo: the same run started again", ["ppo", "--config", SMOKE, "--set", out]),
        ("sft: more demonstrations than the train split has", ["sft", "--demos", "100000", "--output-dir", tmp]),
        ("sft: a model name that does not exist", ["sft", "--model", "nope", "--output-dir", tmp]),
        ("sft: a misspelt family", ["sft", "--demo-families", "json", "--output-dir", tmp]),
        ("sft: a word for --epochs", ["sft", "--epochs", "abc"]),
        ("sft: --batch-size 0", ["sft", "--batch-size", "0", "--output-dir", tmp]),
        ("sft: an eval_split typo", ["sft", "--eval-split", "tset", "--output-dir", tmp]),
        ("rm: no action", ["rm"]),
        ("rm eval: a model folder that does not exist", ["rm", "eval", "--model", tmp / "no_rm", "--no-policy"]),
        ("rm train: a negative learning rate", ["rm", "train", "--lr", "-1", "--out", tmp / "rm"]),
        ("rm train: an empty folder as the backbone", ["rm", "train", "--backbone", empty, "--out", tmp / "rm2",
                                                       "--no-progress"]),
        ("bench: --updates 0", ["bench", "--updates", "0"]),
        ("bench: --out inside a file", ["bench", "--out", a_file / "bench.json"]),
        ("bench: --only both", ["bench", "--only", "both"]),
        ("bench-learning: a preset that does not exist", ["bench-learning", "--config", "configs/nope.yaml"]),
        ("bench-learning: --minutes 0", ["bench-learning", "--config", SMOKE, "--minutes", "0"]),
        ("bench-learning: --set with no value", ["bench-learning", "--config", SMOKE, "--set", "seed"]),
        ("bench-learning: --demo-noise without --sft", ["bench-learning", "--config", SMOKE, "--demo-noise", "0.2"]),
        ("data: --out is a file", ["data", "--out", a_file]),
        ("model: a name that does not exist", ["model", "nope"]),
        ("model: an empty folder", ["model", empty]),
        ("clean-notebooks: a notebook that does not exist", ["clean-notebooks", tmp / "missing.ipynb"]),
        ("clean-notebooks: a notebook that is not JSON", ["clean-notebooks", broken_nb]),
        ("an unknown command", ["pop"]),
    ]


def answer(argv: list[str]) -> tuple[str, str]:
    """(exit code, the last line of stderr, or of stdout when stderr is empty) of one command."""
    from course_utils import __main__ as cli

    out, err = io.StringIO(), io.StringIO()
    signal.alarm(LIMIT_S)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            cli.main([str(a) for a in argv])
        code = "0"
    except SystemExit as stopped:
        code = str(stopped.code if isinstance(stopped.code, int) else 1)
        if isinstance(stopped.code, str):  # SystemExit("message") prints the message, exit status 1
            err.write(stopped.code + "\n")
    except TookTooLong:
        return "-", f"(no answer within {LIMIT_S} s: it started working instead of refusing)"
    except BaseException as error:  # noqa: BLE001 - a traceback is what this survey looks for
        return "traceback", f"{type(error).__name__}: {' '.join(str(error).split())[:300]}"
    finally:
        signal.alarm(0)
    lines = [x for x in err.getvalue().replace("\r", "\n").splitlines() if x.strip()] or \
        [x for x in out.getvalue().splitlines() if x.strip()]
    return code, lines[-1] if lines else "(nothing printed)"


def main() -> None:
    def too_long(*_):
        raise TookTooLong

    signal.signal(signal.SIGALRM, too_long)
    os.chdir(ROOT)
    rows = []
    with tempfile.TemporaryDirectory(prefix="bad-inputs-") as tmp:
        for number, (what, argv) in enumerate(cases(Path(tmp)), start=1):
            code, line = answer(argv)
            shown = " ".join(str(a) for a in argv).replace(tmp, "$TMP")
            rows.append({"n": number, "what": what, "command": shown, "exit": code, "answer": line.replace(tmp, "$TMP")})
            print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    print("| # | bad input | command (`python -m course_utils ...`) | exit | the answer |\n|---|---|---|---|---|")
    for r in rows:
        answer_text = r["answer"].replace("|", "\\|")
        print(f"| {r['n']} | {r['what']} | `{r['command']}` | {r['exit']} | {answer_text} |")


if __name__ == "__main__":
    main()
