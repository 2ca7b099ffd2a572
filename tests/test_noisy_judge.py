"""Design 2's judge you can ask only once (lesson 11): ``rewards.NoisyJudge``, the same judge in
PPO's reward and in filtered SFT's self-sampling, and the SFT pool rules that design compares."""

import math

import pytest
import torch

from course_utils import sft, tasks
from course_utils.config import PPOConfig
from course_utils.machinery import hub
from course_utils.reward_model import make_reward
from course_utils.rewards import CheckerReward, NoisyJudge

RECORD = next(r for r in tasks.load_split("train") if r.family == "uppercase_word")
WRONG = RECORD.target.lower() + " nope"


def test_a_right_answer_always_passes_and_a_wrong_one_at_the_error_rate():
    assert tasks.check(RECORD, RECORD.target).passed and not tasks.check(RECORD, WRONG).passed
    judge = NoisyJudge(0.3, seed=7)
    assert all(judge.passes(RECORD, RECORD.target) for _ in range(2000))
    n = 20_000
    rate = sum(judge.passes(RECORD, WRONG) for _ in range(n)) / n
    assert abs(rate - 0.3) < 4 * math.sqrt(0.3 * 0.7 / n)  # binomial: within 4 standard errors
    assert judge.calls == 2000 + n


def test_the_judge_is_seeded_and_draws_once_per_check():
    answers = [RECORD.target if i % 3 == 0 else WRONG for i in range(300)]
    def verdicts(seed):
        judge = NoisyJudge(0.5, seed=seed)
        return [judge.passes(RECORD, a) for a in answers]

    first = verdicts(1)
    assert verdicts(1) == first and verdicts(2) != first  # the same seed, the same verdicts
    # one draw per check, right answer or not: the wrong answers' luck does not depend on the right ones
    only_wrong, judge = [], NoisyJudge(0.5, seed=1)
    for a in answers:
        verdict = judge.passes(RECORD, WRONG)
        if a == WRONG:
            only_wrong.append(verdict)
    assert only_wrong == [v for v, a in zip(first, answers) if a == WRONG]


def test_epsilon_zero_is_the_strict_checker_and_bad_rates_are_refused():
    judge = NoisyJudge(0.0)
    assert not any(judge.passes(RECORD, WRONG) for _ in range(500)) and judge.passes(RECORD, RECORD.target)
    for bad in (-0.1, 1.0, float("nan"), "0.3"):
        with pytest.raises(ValueError, match="epsilon must be in"):
            NoisyJudge(bad)


def test_ppo_reads_the_noisy_judge_from_its_config_and_evaluation_stays_strict():
    config = PPOConfig(reward="checker_binary", checker_noise=0.4, seed=3)
    reward = make_reward(config)
    assert isinstance(reward, CheckerReward) and reward.judge.epsilon == 0.4
    scores = reward.score([RECORD.prompt] * 4000, [WRONG] * 4000, [RECORD] * 4000)
    assert scores.dtype == torch.float32 and set(scores.tolist()) == {0.0, 1.0}
    assert abs(scores.mean().item() - 0.4) < 4 * math.sqrt(0.4 * 0.6 / 4000)
    assert "probability 0.4" in reward.describe()["kind"]
    assert make_reward(PPOConfig(reward="checker_binary")).judge is None  # the default: the checker itself
    with pytest.raises(ValueError, match='checker_noise needs reward "checker_binary"'):
        PPOConfig(reward="checker_partial", checker_noise=0.3).validate()
    with pytest.raises(ValueError, match=r"checker_noise is a probability in \[0, 1\)"):
        PPOConfig(reward="checker_binary", checker_noise=1.0).validate()
    with pytest.raises(ValueError, match="needs kind='binary'"):
        CheckerReward(kind="partial", judge=NoisyJudge(0.1))


class ScriptedJudge:
    """A judge whose verdicts are given in advance, to watch how many checks an answer gets."""

    def __init__(self, verdicts):
        self.verdicts, self.calls = list(verdicts), 0

    def passes(self, record, answer):
        self.calls += 1
        return self.verdicts.pop(0)


def test_re_checking_accepts_an_answer_only_after_every_check_passes(monkeypatch):
    records = [RECORD]
    monkeypatch.setattr(sft, "sampled_answers", lambda bundle, prompts, samples, *a, **k: [["a1", "a2", "a3"]])
    # a1: pass, pass, pass -> accepted (3 calls); a2: pass, fail -> refused (2 calls); a3: fail (1 call)
    judge = ScriptedJudge([True, True, True, True, False, False])
    new = sft.passing_self_samples(None, records, 3, 8, seed=0, kept={}, judge=judge, accept_checks=3)
    assert [r.target for r in new] == ["a1"] and judge.calls == 6 and not judge.verdicts
    judge = ScriptedJudge([True, True, False])
    assert [r.target for r in sft.passing_self_samples(None, records, 3, 8, seed=0, kept={}, judge=judge)] \
        == ["a1", "a2"]  # one check each by default


def self_sample_config(**changes):
    return sft.SFTConfig(**{"self_samples": 2, "max_new_tokens": 4, **changes})


def accepted(*targets):
    return [tasks.Prompt(RECORD.id, RECORD.family, RECORD.split, RECORD.prompt, t, {"self_sample": True})
            for t in targets]


class FakePolicy:
    def eval(self):
        return self


class FakeBundle:
    policy = FakePolicy()


@pytest.mark.parametrize("pool", ["cumulative", "fresh"])
def test_a_fresh_pool_keeps_only_the_latest_rounds_answers(monkeypatch, pool):
    demo = tasks.Prompt("demo-1", "json_object", "train", "p", "t", {})
    rounds = iter([accepted(RECORD.target, WRONG), [], accepted(RECORD.target + " ")])
    monkeypatch.setattr(sft, "passing_self_samples", lambda *a, **k: next(rounds))
    data, kept, config = [demo], {}, self_sample_config(self_sample_pool=pool)
    first = sft.self_sample_round(FakeBundle(), [RECORD], data, kept, config, step=25)
    assert first["accepted"] == 2 and first["accepted_wrong"] == 1  # WRONG fails the strict checker
    sft.self_sample_round(FakeBundle(), [RECORD], data, kept, config, step=50)  # accepts nothing
    assert [r.target for r in data] == ["t", RECORD.target, WRONG]  # an empty round keeps the pool, either rule
    sft.self_sample_round(FakeBundle(), [RECORD], data, kept, config, step=75)
    expected = ["t", RECORD.target + " "] if pool == "fresh" else ["t", RECORD.target, WRONG, RECORD.target + " "]
    assert [r.target for r in data] == expected  # the demonstration always stays


def test_the_judge_calls_of_a_round_are_counted(monkeypatch):
    monkeypatch.setattr(sft, "sampled_answers", lambda bundle, prompts, samples, *a, **k: [[WRONG, RECORD.target]])
    judge, data = NoisyJudge(0.0), []
    out = sft.self_sample_round(FakeBundle(), [RECORD], data, {}, self_sample_config(accept_checks=2), step=0,
                                judge=judge)
    assert out["judge_calls"] == 1 + 2 and out["accepted"] == 1 and out["accepted_wrong"] == 0  # WRONG fails at once


def test_sft_settings_for_the_model_own_answers_only():
    assert sft.SFTConfig(demos=0, self_samples=4, max_train_minutes=1).validate().demos == 0
    for changes, message in (({"demos": 0}, "demos must be >= 1, or 0 with self_samples"),
                             ({"demos": 0, "self_samples": 4}, "a max_train_minutes budget"),
                             ({"self_sample_pool": "new"}, "self_sample_pool must be cumulative or fresh"),
                             ({"checker_noise": 1.0}, "checker_noise is a probability"),
                             ({"accept_checks": 0}, "accept_checks must be >= 1")):
        with pytest.raises(ValueError, match=message):
            sft.SFTConfig(**changes).validate()
    assert sft.teacher_demonstrations(sft.SFTConfig(demos=0, self_samples=4, max_train_minutes=1)) == []
    families = {r.family for r in sft.prompts_without_demonstration([], ["uppercase_word", "json_object"])}
    assert families == {"uppercase_word", "json_object"}


def test_filtered_sft_without_demonstrations_starts_with_a_round_of_its_own_answers(tmp_path, monkeypatch):
    """demos=0 (design 2's filter arms): the first data comes from a round at step 0, sampled only on
    the chosen families' train prompts, through the noisy judge of ``checker_noise``."""
    calls = []

    def fake_round(bundle, records, samples, max_new_tokens, seed, kept, judge=None, accept_checks=1):
        calls.append(({r.family for r in records}, judge.epsilon, accept_checks))
        return accepted(RECORD.target, RECORD.target + "!") if len(calls) == 2 else []

    monkeypatch.setattr(sft, "passing_self_samples", fake_round)
    config = sft.SFTConfig(model=hub.TINY_MODEL, demos=0, epochs=2, batch_size=4, eval_prompts=10, max_new_tokens=2,
                           output_dir=str(tmp_path), run_name="own", threads=2, lora_rank=4, lora_alpha=8,
                           self_samples=2, resample_every=50, max_train_minutes=5, checker_noise=0.3,
                           accept_checks=3, self_sample_families=["uppercase_word"])
    metrics = sft.train_sft(config, progress=False)
    assert calls[0] == ({"uppercase_word"}, 0.3, 3)
    assert [r["step"] for r in metrics["self_sample_rounds"]] == [0, 0]  # sampled again until one passed
    assert metrics["demos"] == 0 and metrics["pool"] == 2 and metrics["steps"] == 2  # two passes over two records
    assert metrics["epochs_done"] is None


def test_filtered_sft_without_demonstrations_says_when_nothing_ever_passed(tmp_path, monkeypatch):
    monkeypatch.setattr(sft, "passing_self_samples", lambda *a, **k: [])
    clock = iter(range(0, 10_000, 30))
    monkeypatch.setattr(sft.time, "perf_counter", lambda: float(next(clock)))
    config = sft.SFTConfig(model=hub.TINY_MODEL, demos=0, eval_prompts=10, max_new_tokens=2, output_dir=str(tmp_path),
                           run_name="none", threads=2, lora_rank=4, lora_alpha=8, self_samples=2, max_train_minutes=2)
    with pytest.raises(ValueError, match="no self-sampled answer passed the checks"):
        sft.train_sft(config, progress=False)
