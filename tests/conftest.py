"""Shared test set-up: offline hub, few threads, and the tiny model built once per session."""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# The CPU fast paths default to "auto" (machinery.calibration): pinned here to the kit's measured
# defaults (packed kernels, decode loop), so that no test depends on a stopwatch or spends seconds
# measuring, and the developer's own cache is neither read nor written. Child processes (the CLI,
# torchrun workers, bench's children) inherit it. tests/test_calibration.py points it elsewhere.
os.environ["COURSE_CALIBRATION_FILE"] = os.path.join(os.path.dirname(__file__), "data", "fast_paths_pinned.json")

import pytest  # noqa: E402
import torch  # noqa: E402

torch.set_num_threads(int(os.environ.get("COURSE_THREADS", "2")))


@pytest.fixture(scope="session")
def tiny_model_dir():
    """Folder of the 2-layer test model (real SmolLM2 tokenizer and chat template)."""
    from course_utils.machinery import hub

    return hub.resolve_model(hub.TINY_MODEL)


@pytest.fixture(scope="session")
def tiny_tokenizer(tiny_model_dir):
    from course_utils.machinery import hub

    return hub.load_tokenizer(tiny_model_dir)


# ---------------------------------------------------------------------------------------------
# A tiny policy whose responses stop at EOS after different numbers of tokens (the sampling tests)

PROMPTS = ["Add 2 and 3.", "Write the word cat in capitals.", "Hi", "Count: a, b, c", "Sort: b, a", "Is 7 odd?"]


def stops_at_several_lengths(rollout) -> bool:
    lengths = rollout.response_mask.sum(1)
    return bool(rollout.ended_with_eos.any()) and len(set(lengths.tolist())) > 1


@pytest.fixture()
def stopping_bundle(tiny_model_dir):
    """The tiny model with a non-zero LoRA adapter and an EOS made likely enough that, sampled at
    temperature 1 (24 tokens, seed 3), ``PROMPTS`` stop at EOS after different numbers of tokens."""
    from course_utils.models import LoRASettings, load_bundle
    from course_utils.rollout import SamplingSettings, generate, stop_token_ids, tokenize_prompts

    bundle = load_bundle(tiny_model_dir, lora=LoRASettings(rank=4, alpha=8), device="cpu", seed=0)
    # A non-zero adapter (B starts at 0): the policy differs from the reference, so sampling with a
    # stale packed copy (the base weights where LoRA is merged in) would show.
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, parameter in bundle.policy.lm.named_parameters():
            if "lora_B" in name:
                parameter.copy_(0.3 * torch.randn(parameter.shape, generator=generator))
    # Make EOS likely: its output row points along the mean final state of the prompts, scaled
    # (a logit near log(vocabulary size), about even odds) until responses stop at EOS after
    # different numbers of tokens. The row is tied to the input embedding; that
    # only changes the model, not the comparisons.
    eos = stop_token_ids(bundle.tokenizer, bundle.policy.base_model)[0]
    head = bundle.policy.base_model.get_output_embeddings().weight
    query, mask = tokenize_prompts(bundle.tokenizer, PROMPTS, None, 24, None)
    settings = SamplingSettings(max_new_tokens=24, temperature=1.0)
    with torch.no_grad():
        final = bundle.policy.base_model(input_ids=query, attention_mask=mask, output_hidden_states=True)
        mean_state = final.hidden_states[-1][:, -1].mean(0)
        for scale in (11.0, 10.5, 11.5, 10.0, 12.0, 9.5):
            head[eos] = scale * mean_state / mean_state.dot(mean_state)
            if stops_at_several_lengths(generate(bundle, prompts=PROMPTS, settings=settings, seed=3,
                                                 packed=False, decode_loop=False)):
                break
    return bundle


# ---------------------------------------------------------------------------------------------
# The command line in-process: exit code, stdout, stderr


def run_cli(capsys, *argv) -> tuple[int, str, str]:
    """Run ``python -m course_utils *argv`` in this process; ``(exit code, stdout, stderr)``, the
    code 0 when the command returned without ``sys.exit``. In-process, so a test can monkeypatch a
    fault (a full disk, a Ctrl-C) into the run."""
    from course_utils import __main__ as cli

    try:
        cli.main([str(a) for a in argv])
        code = 0
    except SystemExit as stopped:
        code = stopped.code if isinstance(stopped.code, int) else 1
    out, err = capsys.readouterr()
    return code, out, err


def last_line(err: str) -> str:
    """The last line of stderr: the command's answer (progress bars may come before it)."""
    lines = [line for line in err.replace("\r", "\n").splitlines() if line.strip()]
    return lines[-1] if lines else ""
