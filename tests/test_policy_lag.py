"""Policy lag on one fixed batch (course_utils.lesson_aids.policy_lag), on the tiny model with the smoke preset.

Independent references: a plain-Python recomputation of every measured number from a separate
forward pass; the trainer's own per-step log (with one minibatch per epoch, the statistics it
records before step k+1 are those of the policy after k epochs); ``ppo_update`` itself (the same
steps, so the same logged numbers); exact enumeration for the effective sample size.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch

from course_utils.lesson_aids import policy_lag as pl
from course_utils.config import load_config

ROOT = Path(__file__).resolve().parents[1]
SMOKE = ROOT / "configs" / "smoke.yaml"
LR = 1e-2  # large enough that the tiny model's ratios visibly leave the clip band within a few steps


def make_trainer(tmp_path, **overrides):
    from course_utils.trainer import PPOTrainer

    torch.set_num_threads(1)
    config = load_config(SMOKE, output_dir=str(tmp_path), learning_rate=LR, **overrides)
    return PPOTrainer(config, quiet=True)


@pytest.fixture(scope="module")
def fixed(tmp_path_factory):
    """A trainer, its state before sampling, one prepared batch and the state right after it."""
    trainer = make_trainer(tmp_path_factory.mktemp("lag"))
    before_sampling = pl.snapshot(trainer)
    batch = trainer.prepare_batch()
    return trainer, batch, pl.snapshot(trainer), before_sampling


def weights(trainer) -> dict[str, torch.Tensor]:
    return {n: p.detach().clone() for n, p in trainer.policy.named_parameters() if p.requires_grad}


# ---------------------------------------------------------------- effective sample size


def test_effective_sample_fraction_on_hand_worked_ratios():
    assert pl.effective_sample_fraction(torch.ones(7)) == 1.0
    ratios = [2.0, 0.5, 0.5, 1.0]
    by_hand = sum(ratios) ** 2 / (len(ratios) * sum(r * r for r in ratios))  # 16 / (4 * 5.5)
    assert math.isclose(pl.effective_sample_fraction(torch.tensor(ratios)), by_hand, rel_tol=1e-12)
    assert math.isclose(by_hand, 16 / 22)
    # One sample carrying (almost) all the weight: the fraction tends to 1/n.
    assert pl.effective_sample_fraction(torch.tensor([1e6, 1e-6, 1e-6, 1e-6])) == pytest.approx(0.25, rel=1e-5)


def test_effective_sample_fraction_estimates_one_over_one_plus_chi_square():
    # Exact: sampling from p_old, E[r] = 1 and E[r²] = Σ p_new² / p_old = 1 + χ²(p_new ‖ p_old).
    p_old = np.array([0.4, 0.3, 0.15, 0.1, 0.05])
    p_new = np.array([0.2, 0.3, 0.2, 0.1, 0.2])
    exact = 1.0 / sum(n * n / o for n, o in zip(p_new, p_old))
    draws = np.random.default_rng(0).choice(len(p_old), size=200_000, p=p_old)
    sampled = pl.effective_sample_fraction(torch.tensor(p_new[draws] / p_old[draws]))
    assert sampled == pytest.approx(exact, rel=0.02)


@pytest.mark.parametrize("bad", [torch.tensor([]), torch.tensor([1.0, 0.0]), torch.tensor([1.0, -2.0]),
                                 torch.tensor([1.0, float("inf")])])
def test_effective_sample_fraction_rejects_impossible_ratios(bad):
    with pytest.raises(ValueError):
        pl.effective_sample_fraction(bad)


# ---------------------------------------------------------------- measuring against π_old


def test_the_batch_has_non_zero_advantages(fixed):
    _, batch, _, _ = fixed
    real = batch.rollout.response_mask.bool()
    assert batch.raw_scores.std() > 0 and batch.advantages[real].abs().max() > 0.1


def test_before_any_step_every_ratio_is_exactly_one(fixed):
    trainer, batch, start, _ = fixed
    pl.restore(trainer, start)
    m = pl.measure_against_rollout(trainer, batch)
    assert torch.equal(m["ratios"], torch.ones_like(m["ratios"]))
    assert len(m["ratios"]) == batch.rollout.num_tokens
    assert m["clipfrac"] == 0.0 and m["outside_band"] == 0.0 and m["approx_kl"] == 0.0
    assert m["ratio_std"] == 0.0 and m["effective_sample_fraction"] == 1.0


def test_old_logprobs_from_the_sampler_start_within_round_off_of_one(tmp_path):
    # The cpu preset takes pi_old's log-probs from generation (merged LoRA, KV cache): not bit-equal.
    trainer = make_trainer(tmp_path, old_logprobs_from="generation")
    m = pl.measure_against_rollout(trainer, trainer.prepare_batch())
    assert (m["ratios"] - 1).abs().max() < 1e-4
    assert m["clipfrac"] == 0.0 and m["outside_band"] == 0.0 and abs(m["approx_kl"]) < 1e-8


def test_measurement_equals_a_plain_python_recomputation(fixed):
    from course_utils.rollout import sequence_forward

    trainer, batch, start, _ = fixed
    pl.restore(trainer, start)
    sweep = pl.reuse_batch(trainer, batch, epochs=2)
    got = sweep.epochs[2]
    r_, cfg = batch.rollout, trainer.config
    with torch.no_grad():
        logprobs, _, _ = sequence_forward(trainer.policy, r_.query_ids, r_.query_mask, r_.response_ids,
                                          r_.response_mask, cfg.temperature)
    eps = cfg.cliprange
    ratios, clipped, outside, k3, losses = [], [], [], [], []
    for b in range(r_.batch_size):
        for t in range(r_.response_ids.shape[1]):
            if r_.response_mask[b, t] == 0:
                continue
            r = math.exp(float(logprobs[b, t]) - float(r_.old_logprobs[b, t]))
            a = float(batch.advantages[b, t])
            ratios.append(r)
            # The clipped term is chosen exactly when the token already moved past the band edge
            # in the direction its advantage asks for.
            clipped.append((a > 0 and r > 1 + eps) or (a < 0 and r < 1 - eps))
            outside.append(abs(r - 1) > eps)
            k3.append((r - 1) - math.log(r))
            losses.append(-min(r * a, max(1 - eps, min(r, 1 + eps)) * a))
    n = len(ratios)
    mean = sum(ratios) / n
    assert got["ratio_mean"] == pytest.approx(mean, abs=1e-5)
    assert got["ratio_std"] == pytest.approx(math.sqrt(sum((r - mean) ** 2 for r in ratios) / n), abs=1e-5)
    assert got["ratio_min"] == pytest.approx(min(ratios), abs=1e-5)
    assert got["ratio_max"] == pytest.approx(max(ratios), abs=1e-5)
    assert got["clipfrac"] == pytest.approx(sum(clipped) / n, abs=1e-9)
    assert got["outside_band"] == pytest.approx(sum(outside) / n, abs=1e-9)
    assert got["approx_kl"] == pytest.approx(sum(k3) / n, abs=1e-6)
    assert got["policy_loss"] == pytest.approx(sum(losses) / n, abs=1e-5)
    assert got["effective_sample_fraction"] == pytest.approx(sum(ratios) ** 2 / (n * sum(r * r for r in ratios)),
                                                             abs=1e-6)
    # The tiny model with a large learning rate really has moved: the test is not comparing ones.
    assert got["outside_band"] > 0 and got["approx_kl"] > 1e-4


def test_after_k_epochs_equals_what_the_trainer_logged_before_step_k_plus_1(tmp_path):
    # One minibatch per epoch: step k+1 sees the whole batch (shuffled) with the policy after k epochs.
    trainer = make_trainer(tmp_path, num_minibatches=1)
    batch = trainer.prepare_batch()
    sweep = pl.reuse_batch(trainer, batch, epochs=4)
    logged = sweep.step_stats
    assert sweep.optimizer_steps == 4 and len(logged["ratio_mean"]) == 4
    for k in range(4):
        row = sweep.epochs[k]
        assert logged["ratio_mean"][k] == pytest.approx(row["ratio_mean"], abs=1e-5)
        assert logged["ratio_var"][k] == pytest.approx(row["ratio_std"] ** 2, abs=1e-5)
        assert logged["ratio_max"][k] == pytest.approx(row["ratio_max"], abs=1e-5)
        assert logged["policy_clipfrac"][k] == pytest.approx(row["clipfrac"], abs=1e-9)
        assert logged["approx_kl"][k] == pytest.approx(row["approx_kl"], abs=1e-6)
        assert logged["policy_loss"][k] == pytest.approx(row["policy_loss"], abs=1e-5)
    assert logged["policy_clipfrac"][0] == 0.0  # the first step sees π_old itself


# ---------------------------------------------------------------- k epochs on one batch


def test_more_epochs_continue_where_fewer_stopped(fixed):
    trainer, batch, start, _ = fixed
    pl.restore(trainer, start)
    three = pl.reuse_batch(trainer, batch, epochs=3)
    after_three = weights(trainer)
    pl.restore(trainer, start)
    two = pl.reuse_batch(trainer, batch, epochs=2)
    after_two = weights(trainer)
    # The 2-epoch run is exactly the first two epochs of the 3-epoch run (same start, same batch).
    for a, b in zip(two.epochs, three.epochs[:3]):
        assert {k: v for k, v in a.items() if k not in ("ratios", "logprobs")} == \
               {k: v for k, v in b.items() if k not in ("ratios", "logprobs")}
        assert torch.equal(a["ratios"], b["ratios"])
    # Nothing resets between epochs: each epoch moves the weights further from π_old.
    assert three.optimizer_steps == 6 and three.stale_steps_skipped == 0
    assert any(not torch.equal(after_two[n], after_three[n]) for n in after_two)
    assert all(row["approx_kl"] > 0 for row in three.epochs[1:])
    assert len({row["approx_kl"] for row in three.epochs}) == 4
    assert three.column("epoch") == [0, 1, 2, 3]
    with pytest.raises(KeyError, match="was not measured"):
        three.column("nope")


def test_reuse_batch_takes_the_same_steps_as_ppo_update(fixed):
    from course_utils.update import STEP_STATS

    trainer, reference_batch, _, before_sampling = fixed
    pl.restore(trainer, before_sampling)
    metrics = trainer.ppo_update()
    pl.restore(trainer, before_sampling)
    batch = trainer.prepare_batch()  # the same prompts and samples again
    assert torch.equal(batch.rollout.response_ids, reference_batch.rollout.response_ids)
    sweep = pl.reuse_batch(trainer, batch, epochs=trainer.config.ppo_epochs)
    assert sweep.optimizer_steps == metrics["optimizer_steps"]
    assert sweep.stale_steps_skipped == metrics["stale_steps_skipped"]
    for key in STEP_STATS:
        assert float(np.mean(sweep.step_stats[key])) == pytest.approx(metrics[key], rel=1e-6, abs=1e-9), key


def test_stale_steps_are_skipped_and_the_policy_stops_moving(fixed):
    trainer, batch, start, _ = fixed
    pl.restore(trainer, start)
    free = pl.reuse_batch(trainer, batch, epochs=1)
    pl.restore(trainer, start)
    # Smoke preset: 2 minibatches per epoch. Age 0 and 1 are allowed: 2 steps, then 4 skipped.
    capped = pl.reuse_batch(trainer, batch, epochs=3, max_rollout_age=1)
    assert capped.optimizer_steps == 2 and capped.stale_steps_skipped == 4
    assert [r["optimizer_steps"] for r in capped.epochs] == [0, 2, 2, 2]
    assert [r["stale_steps_skipped"] for r in capped.epochs] == [0, 0, 2, 4]
    assert capped.epochs[1]["approx_kl"] == free.epochs[1]["approx_kl"]  # the first epoch was within the age
    assert capped.epochs[3]["approx_kl"] == capped.epochs[1]["approx_kl"]  # then nothing moved
    pl.restore(trainer, start)
    assert pl.reuse_batch(trainer, batch, epochs=2, max_rollout_age=0).optimizer_steps == 1


def test_target_kl_stops_the_update_before_the_first_step_past_it(fixed):
    from dataclasses import replace

    from course_utils import update as ppo

    trainer, batch, start, _ = fixed

    def run(target_kl):
        pl.restore(trainer, start)
        torch.manual_seed(1)  # the same minibatch order in every call
        return ppo.optimise(trainer.policy, trainer.optimizer, batch, replace(trainer.config, target_kl=target_kl),
                            epochs=3)

    free = run(0.0)
    kls = free["stats"]["approx_kl"]  # measured on each step's forward, before that step
    assert free["optimizer_steps"] == len(kls) == 6 and free["kl_stop_steps_skipped"] == 0
    # The first step whose KL is clearly above every earlier one; a threshold between them.
    k = next(i for i in range(1, len(kls)) if kls[i] > 1.01 * max(kls[:i]) + 1e-9)
    threshold = (max(kls[:k]) + kls[k]) / 2
    stopped = run(threshold / 1.5)
    assert stopped["optimizer_steps"] == k and stopped["kl_stop_steps_skipped"] == 6 - k
    assert stopped["stats"]["approx_kl"] == kls[:k]  # the same steps, then none
    assert run(1e6)["stats"]["approx_kl"] == kls  # a target never reached changes nothing


def test_snapshot_survives_training_and_can_be_restored_twice(fixed):
    trainer, batch, start, _ = fixed
    pl.restore(trainer, start)
    original = weights(trainer)
    pl.reuse_batch(trainer, batch, epochs=1)
    assert any(not torch.equal(original[n], w) for n, w in weights(trainer).items())
    for _ in range(2):
        pl.restore(trainer, start)
        assert all(torch.equal(original[n], w) for n, w in weights(trainer).items())
        assert not trainer.optimizer.state_dict()["state"]  # Adam's moments are back to empty


@pytest.mark.parametrize("kwargs, message", [({"epochs": 0}, "epochs must be"), ({"epochs": 1.5}, "epochs must be"),
                                             ({"epochs": 1, "max_rollout_age": -1}, "max_rollout_age must be")])
def test_bad_arguments_are_named(fixed, kwargs, message):
    trainer, batch, _, _ = fixed
    with pytest.raises(ValueError, match=message):
        pl.reuse_batch(trainer, batch, **kwargs)


def test_table_has_one_line_per_epoch_count(fixed):
    trainer, batch, start, _ = fixed
    pl.restore(trainer, start)
    sweep = pl.reuse_batch(trainer, batch, epochs=2)
    lines = pl.format_reuse_table(sweep).splitlines()
    assert len(lines) == 1 + 3 and "clipfrac" in lines[0] and lines[1].split()[0] == "0"


# ---------------------------------------------------------------- plots


def test_ratio_histograms_count_every_token_and_shade_the_band():
    ratios = {1: torch.tensor([1.0, 1.05, 0.97]), 8: torch.tensor([0.5, 1.0, 1.3, 2.0])}
    fig = pl.plot_ratio_histograms(ratios, cliprange=0.2, bins=10)
    axes = fig.get_axes()
    assert len(axes) == 2
    for ax, (k, r) in zip(axes, sorted(ratios.items())):
        bars = [p for p in ax.patches if p.get_gid() == f"ratios after {k} epochs"]
        assert sum(p.get_height() for p in bars) == len(r)
        assert any(p.get_gid() == "clip band" for p in ax.patches)
    assert "75% outside" in axes[1].get_title()  # 0.5, 1.3 and 2.0 of the four ratios


def test_ratio_histograms_show_which_tokens_fall_inside_the_band_on_a_wide_log_axis():
    # Issue 49 (week 9): over seven decades the band was a sliver behind a bar that straddled it.
    ratios = {8: torch.tensor([1e-6, 3e-4, 0.05, 0.5, 0.79, 0.81, 0.95, 1.0, 1.0, 1.1, 1.19, 1.21, 2.5])}
    ax = pl.plot_ratio_histograms(ratios, cliprange=0.2).get_axes()[0]
    bars = [p for p in ax.patches if p.get_gid() == "ratios after 8 epochs" and p.get_height() > 0]
    inside, outside = [], []
    for bar in bars:
        left, right = bar.get_x(), bar.get_x() + bar.get_width()
        assert right <= 0.8 + 1e-9 or left >= 1.2 - 1e-9 or (left >= 0.8 - 1e-9 and right <= 1.2 + 1e-9)
        (inside if 0.8 - 1e-9 <= left and right <= 1.2 + 1e-9 else outside).append(bar)
    assert sum(b.get_height() for b in inside) == 6 and sum(b.get_height() for b in outside) == 7
    assert {b.get_facecolor() for b in inside}.isdisjoint({b.get_facecolor() for b in outside})
    edges = [line for line in ax.lines if line.get_gid() == "clip band edge"]
    assert sorted(line.get_xdata()[0] for line in edges) == pytest.approx([0.8, 1.2])
    assert all(line.get_zorder() > max(b.get_zorder() for b in bars) for line in edges)


@pytest.mark.parametrize("bad", [{}, {1: torch.tensor([])}, {1: torch.tensor([1.0, 0.0])}])
def test_ratio_histograms_reject_bad_input(bad):
    with pytest.raises(ValueError):
        pl.plot_ratio_histograms(bad, cliprange=0.2)


def test_lag_plot_kl_panel_starts_at_epoch_one():
    # Issue 35 (week 9): a round-off KL of 3.8e-11 at epoch 0 stretched the log axis over ten decades.
    rows = [{"epoch": e, "clipfrac": 0.1 * e, "approx_kl": 3.8e-11 if e == 0 else 0.16 * e, "ratio_std": 0.05 * e,
             "effective_sample_fraction": 1 - 0.02 * e} for e in range(9)]
    fig = pl.plot_lag_vs_epoch({"preset": rows})
    (line,) = [ln for ax in fig.get_axes() for ln in ax.get_lines() if ln.get_gid() == "approx_kl: preset"]
    assert list(line.get_xdata()) == list(range(1, 9))
    fig.canvas.draw()
    assert line.axes.get_ylim()[0] > 1e-3  # the axis spans the measured KL, not the round-off


def test_lag_plot_draws_each_run_as_given():
    rows = [{"epoch": e, "clipfrac": 0.1 * e, "approx_kl": 0.01 * e, "ratio_std": 0.05 * e,
             "effective_sample_fraction": 1 - 0.02 * e} for e in range(4)]
    fig = pl.plot_lag_vs_epoch({"no limit": rows, "age 4": rows[:2]}, cliprange=0.2)
    lines = {line.get_gid(): line for ax in fig.get_axes() for line in ax.get_lines()}
    assert list(lines["clipfrac: no limit"].get_ydata()) == [r["clipfrac"] for r in rows]
    # approximate KL on a log axis: epoch 0's zero is left out, a KL 1000 times smaller still shows
    assert list(lines["approx_kl: age 4"].get_xdata()) == [1]
    kl_axis = next(ax for ax in fig.get_axes() if "approx_kl: no limit" in [ln.get_gid() for ln in ax.get_lines()])
    assert kl_axis.get_yscale() == "log" and "log scale" in kl_axis.get_ylabel()
    small = [{**r, "approx_kl": r["approx_kl"] / 1000} for r in rows]
    fig = pl.plot_lag_vs_epoch({"preset": rows, "small lr": small})
    lines = {line.get_gid(): line for ax in fig.get_axes() for line in ax.get_lines()}
    assert list(lines["approx_kl: small lr"].get_ydata()) == [r["approx_kl"] for r in small[1:]]
    with pytest.raises(ValueError, match="needs per-epoch rows"):
        pl.plot_lag_vs_epoch({"broken": [{"epoch": 0}]})
    with pytest.raises(ValueError, match="runs is empty"):
        pl.plot_lag_vs_epoch({})
