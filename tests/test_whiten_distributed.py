"""Global whitening: two gloo processes holding unequal parts of a batch get exactly what one
process gets on the whole batch (the statistics are all-reduced, padding never counted)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from course_utils.ppo_math import global_masked_mean_var, masked_whiten
from course_utils.machinery.distributed import free_port

torch.set_num_threads(1)

ROOT = Path(__file__).resolve().parents[1]
WORKER = Path(__file__).with_name("whiten_worker.py")


def loopback_interface() -> str | None:
    names = [name for _, name in socket.if_nameindex()] if hasattr(socket, "if_nameindex") else []
    return next((n for n in ("lo", "lo0") if n in names), None)


def make_scenarios() -> list[dict]:
    g = torch.Generator().manual_seed(0)
    scenarios = []
    # 1. Seven responses split 3 / 4, lengths with an empty row, a 1-token row and a full row.
    lengths = torch.tensor([0, 5, 1, 6, 3, 2, 6])
    # 2. Rank 0 holds only empty rows: locally there is nothing to whiten at all.
    lengths_2 = torch.tensor([0, 0, 4, 6, 1])
    for lens, split in ((lengths, 3), (lengths_2, 2)):
        x = torch.randn(len(lens), 6, generator=g, dtype=torch.float64) * 3.0 + 1.5
        x[:split] += 2.0  # the parts differ in distribution, so local statistics would be wrong
        mask = (torch.arange(6)[None, :] < lens[:, None]).to(torch.float64)
        x = torch.where(mask.bool(), x, torch.full_like(x, 1e6))  # garbage at padding must not count
        scenarios.append(
            {"x": x, "mask": mask, "x_parts": [x[:split], x[split:]], "mask_parts": [mask[:split], mask[split:]]}
        )
    return scenarios


def run_two_processes(tmp_path: Path, scenarios: list[dict]) -> list[list[dict]]:
    data = tmp_path / "data.pt"
    torch.save([{"x_parts": s["x_parts"], "mask_parts": s["mask_parts"]} for s in scenarios], data)
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    if loopback_interface() and "GLOO_SOCKET_IFNAME" not in env:
        env["GLOO_SOCKET_IFNAME"] = loopback_interface()
    port = free_port()
    procs = [
        subprocess.Popen(
            [sys.executable, str(WORKER), str(rank), "2", str(port), str(data), str(tmp_path / f"out{rank}.pt")],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for rank in range(2)
    ]
    outputs = []
    for proc in procs:
        try:
            out, _ = proc.communicate(timeout=120)
        except subprocess.TimeoutExpired:
            for p in procs:
                p.kill()
            pytest.fail("the two gloo processes did not finish within 120 s (blocked collective?)")
        outputs.append(out)
    for rank, (proc, out) in enumerate(zip(procs, outputs)):
        assert proc.returncode == 0, f"rank {rank} failed:\n{out}"
    return [torch.load(tmp_path / f"out{rank}.pt") for rank in range(2)]


def test_two_processes_whiten_like_one_process_on_the_whole_batch(tmp_path):
    scenarios = make_scenarios()
    per_rank = run_two_processes(tmp_path, scenarios)
    for i, scenario in enumerate(scenarios):
        x, mask = scenario["x"], scenario["mask"]
        rank0, rank1 = per_rank[0][i], per_rank[1][i]
        mean, var = global_masked_mean_var(x, mask)
        for key, expected in (
            ("whitened", masked_whiten(x, mask)),
            ("rescaled", masked_whiten(x, mask, shift_mean=False)),
            ("whitened_float32", masked_whiten(x.float(), mask)),
        ):
            combined = torch.cat([rank0[key], rank1[key]])
            assert combined.dtype == expected.dtype
            torch.testing.assert_close(combined, expected, atol=1e-6, rtol=0)
        for r in (rank0, rank1):  # every process holds the same global statistics
            torch.testing.assert_close(r["mean"], mean, atol=1e-12, rtol=0)
            torch.testing.assert_close(r["var"], var, atol=1e-12, rtol=0)
        # The single-process reference really is the whole-batch statistic.
        real = x[mask.bool()]
        torch.testing.assert_close(mean, real.mean(), atol=1e-12, rtol=0)
        torch.testing.assert_close(var, real.var(unbiased=True), atol=1e-12, rtol=0)


def test_local_whitening_of_a_part_is_not_the_global_answer():
    # What the all-reduce fixes: whitening rank 0's part on its own gives different numbers.
    scenario = make_scenarios()[0]
    x0, m0 = scenario["x_parts"][0], scenario["mask_parts"][0]
    local = masked_whiten(x0, m0, distributed=False)
    global_rows = masked_whiten(scenario["x"], scenario["mask"])[: x0.shape[0]]
    assert (local - global_rows).abs().max() > 0.1
    # And rank 0 of scenario 2 holds no tokens: alone it cannot whiten at all.
    with pytest.raises(ValueError, match="selects no tokens"):
        masked_whiten(make_scenarios()[1]["x_parts"][0], make_scenarios()[1]["mask_parts"][0])


def test_two_processes_train_on_the_global_token_mean(tmp_path):
    """Each process's loss is a mean over its own tokens; weighted by its share of the tokens,
    the averaged gradient equals one process's gradient of the token mean over the whole batch."""
    scenarios = make_scenarios()[:1]  # 3 rows (6 tokens) on rank 0, 4 rows (17 tokens) on rank 1
    per_rank = run_two_processes(tmp_path, scenarios)
    x, mask = scenarios[0]["x"], scenarios[0]["mask"]
    w = torch.ones(x.shape[1], dtype=x.dtype, requires_grad=True)
    from course_utils.ppo_math import masked_mean

    masked_mean(x * w, mask).backward()
    for rank in range(2):
        torch.testing.assert_close(per_rank[rank][0]["loss_grad"], w.grad)
    # Without the weight the two ranks' means count equally: a token of the short share weighs more.
    assert not torch.allclose(per_rank[0][0]["loss_grad_unweighted"], w.grad)

