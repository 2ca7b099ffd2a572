"""Shared test set-up: offline hub, few threads, and the tiny model built once per session."""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

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
