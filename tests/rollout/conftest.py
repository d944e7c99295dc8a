"""Fixtures for rollout tests. The fake env itself is tests/fakes/steps.py (workers import it by name)."""

from __future__ import annotations

import functools

import pytest

from tests.fakes.steps import make_fake_env

from evoharness_rl.rollout.episode import EpisodeSettings


@pytest.fixture
def fake_factory():
    """A picklable env factory; pass keyword overrides to make_fake_env."""

    def build(**kwargs):
        return functools.partial(make_fake_env, **kwargs)

    return build


@pytest.fixture
def settings():
    return EpisodeSettings(mode="adaptive", context="per_turn", max_steps=12)


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory):
    """A tiny Qwen3 checkpoint built locally by `init-model` (random weights, trained tokenizer)."""
    from evoharness_rl.models import init_model

    return str(init_model("tiny", tmp_path_factory.mktemp("tiny") / "model", seed=0))


@pytest.fixture(scope="session")
def hf_backend(tiny_model_dir):
    from evoharness_rl.engines.hf import HFBackend
    from evoharness_rl.models import load_tokenizer

    tokenizer = load_tokenizer(tiny_model_dir)
    return HFBackend(tiny_model_dir, tokenizer, device="cpu", dtype="float32", batch_size=8)
