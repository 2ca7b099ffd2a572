"""The course's checker as a verl custom reward function (verl 0.9.1).

verl calls, for every sampled response (its ``NaiveRewardManager`` decodes the response with
``skip_special_tokens=True`` first)::

    compute_score(data_source=..., solution_str=<the response text>, ground_truth=<the row's
                  reward_model.ground_truth>, extra_info=<the row's extra_info>)

and reads a float, or a dict with a ``"score"`` (logged next to the other keys of the dict).

    compute_score           the strict checker: score 1.0 if ``tasks.check`` passes, else 0.0
                            (our ``reward: checker_binary``)
    compute_score_partial   the partial-credit tiers of ``tasks.partial_credit_reward``
                            (our ``reward: checker_partial``)

Both also return ``acc``, 1.0 exactly when the check passes: verl logs it per ``data_source``
(one per task family in the export), which is our held-out pass rate by family.

``python -m course_utils export verl`` copies this file into its folder as ``course_reward.py``,
next to ``course_tasks.py``, a copy of ``course_utils/tasks.py`` made at export time; the launch
script points ``reward.custom_reward_function.path`` at it. The exported pair needs only Python's
standard library, on purpose: verl loads the file by path inside its Ray workers on the GPU
machine, where verl's GPU extras pin their own torch and transformers (``verl[vllm]==0.9.1``:
torch 2.11, transformers 5.9) while this kit pins torch 2.13 and transformers 5.24, so installing
the kit there would fight verl's pins. A copy is still one checker, not two: it is written from
tasks.py's source (its sha256 is in the folder's ``export_manifest.json``), and
tests/test_engines.py checks that it grades every prompt of every split as ``tasks.check`` does.
Without a ``course_tasks.py`` beside it (this file inside the kit) it uses ``course_utils.tasks``.

The row's ``extra_info["record"]`` carries the whole task record as JSON (``tasks.Prompt``): the
checker needs more than the target (the JSON object, the placeholders, the prompt itself).
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import json
import sys
from pathlib import Path

CHECKER_FILE = "course_tasks.py"


@functools.lru_cache(maxsize=1)
def checker():
    """The tasks module: the exported copy beside this file if there is one, else the kit's own."""
    copy = Path(__file__).with_name(CHECKER_FILE)
    if not copy.is_file():
        try:
            from course_utils import tasks
        except ImportError as error:
            raise ImportError(f"{Path(__file__).name} needs {CHECKER_FILE} beside it; "
                              "`python -m course_utils export verl` writes both into one folder") from error
        return tasks
    name = "course_tasks_" + hashlib.sha256(str(copy.resolve()).encode()).hexdigest()[:12]
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, copy)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module  # registered before it runs: its dataclasses look their module up
        spec.loader.exec_module(module)
    return sys.modules[name]


def task_record(ground_truth: str, extra_info):
    """The ``tasks.Prompt`` a row carries in ``extra_info["record"]``; refuses a row whose record
    is missing or disagrees with the row's ground truth (rows from another export, or mixed up)."""
    if not isinstance(extra_info, dict) or "record" not in extra_info:
        raise ValueError("extra_info has no 'record': this reward reads the rows that "
                         "`python -m course_utils export verl` writes")
    record = checker().Prompt.from_dict(json.loads(extra_info["record"]))
    if record.target != ground_truth:
        raise ValueError(f"row {record.id}: reward_model.ground_truth {ground_truth!r} is not the record's "
                         f"target {record.target!r}; re-export the data")
    return record


def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs) -> dict:
    """The strict checker: ``{"score": 1.0 or 0.0, "acc": the same}`` (tasks.binary_reward)."""
    passed = checker().check(task_record(ground_truth, extra_info), solution_str).passed
    return {"score": float(passed), "acc": float(passed)}


def compute_score_partial(data_source, solution_str, ground_truth, extra_info=None, **kwargs) -> dict:
    """Partial credit: ``{"score": tasks.partial_credit_reward, "acc": 1.0 if the check passes}``."""
    tasks = checker()
    result = tasks.check(task_record(ground_truth, extra_info), solution_str)
    return {"score": tasks.reward_for(result), "acc": float(result.passed)}
