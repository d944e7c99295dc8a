"""Fixtures shared across test packages."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def local_openai_server(tmp_path_factory):
    """A real vLLM OpenAI-compatible server on a tiny `init-model` checkpoint, started once per session.

    Yields (base_url, served model name). The model is random: its answers are garbage text.
    """
    pytest.importorskip("vllm")
    from evoharness_rl.models import init_model
    from tests.vllm_server import vllm_server

    model_dir = init_model("tiny", tmp_path_factory.mktemp("openai-model") / "tiny")
    with vllm_server(model_dir, tmp_path_factory.mktemp("openai-server"), ("--max-model-len", "8192")) as url:
        yield url, "tiny"


def pytest_configure(config):
    """Test environments join the one registry like any adapter (env.name=choice)."""
    from evoharness_rl.envs import register_env

    register_env("choice", "tests.fakes.choice:make_choice_env")
