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


@pytest.fixture(scope="session")
def ray_instance():
    """A local Ray instance for the env.pool=ray tests, started once: 2 logical CPUs, no dashboard; shut down after."""
    import ray

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()


@pytest.fixture(params=["process", pytest.param("ray", marks=pytest.mark.slow)])
def pool_kind(request):
    """Runs a test once per environment pool (env.pool); the ray run uses the session's local Ray instance
    (slow: starting Ray and its actors takes tens of seconds on two cores)."""
    if request.param == "ray":
        request.getfixturevalue("ray_instance")
    return request.param


@pytest.fixture
def new_pool(pool_kind):
    """Build the `pool_kind` pool through `make_pool`, as the CLI does: new_pool(env_factory, workers, timeout)."""
    from evoharness_rl.config import EnvConfig
    from evoharness_rl.rollout.engine import make_pool

    def build(env_factory, num_workers=2, step_timeout_s=30.0):
        cfg = EnvConfig(pool=pool_kind, num_workers=num_workers, step_timeout_s=step_timeout_s,
                        ray_cpus_per_worker=0.5)
        return make_pool(env_factory, cfg)

    return build
