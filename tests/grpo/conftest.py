"""Fixtures for GRPO tests: a tiny local model and the fake environment (tests/fakes/count.py)."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> Path:
    """A randomly initialised ~1M-parameter Qwen3 checkpoint with a local tokenizer."""
    from evoharness_rl.models import init_model

    return init_model("tiny", tmp_path_factory.mktemp("models") / "tiny")


@pytest.fixture(scope="session")
def warm_model_dir(tiny_model_dir, tmp_path_factory) -> Path:
    """The tiny model after a short SFT on the fake env's response formats (a varied, parseable policy)."""
    from tests.fakes.count import warm_start

    return warm_start(tiny_model_dir, tmp_path_factory.mktemp("models") / "warm")


@pytest.fixture(autouse=True, scope="module")
def one_torch_thread():
    """Tiny models run fastest on one thread (and far faster than two on a busy 2-core machine); restored after."""
    import torch

    saved = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(saved)
