"""Chat templates that are not prefix-stable across turns are named when accumulated context uses them.

Qwen3's template (TRL ships it: trl/chat_templates/qwen3.jinja) drops the `<think>` block of
every assistant message before the last user message, so an accumulated conversation (the
ids as generated) is not what the template renders for the same turns. TRL's training
variant of it keeps earlier turns, and is accepted.
"""

from __future__ import annotations

import copy
import logging
from pathlib import Path

import pytest

from evoharness_rl.engines.base import SamplingSettings
from evoharness_rl.engines.tokens import prefix_stability_problem
from evoharness_rl.rollout.engine import EpisodeJob, RolloutEngine
from evoharness_rl.rollout.episode import EpisodeSettings
from evoharness_rl.rollout.pool import EnvPool


def trl_template(name: str) -> str:
    trl = pytest.importorskip("trl")
    return (Path(trl.__file__).parent / "chat_templates" / name).read_text(encoding="utf-8")


@pytest.fixture
def qwen3_backend(hf_backend):
    """The tiny model's hf backend whose tokenizer renders with Qwen3's own chat template."""
    from evoharness_rl.engines.hf import HFBackend

    tokenizer = copy.deepcopy(hf_backend.tokenizer)
    tokenizer.chat_template = trl_template("qwen3.jinja")
    return HFBackend(hf_backend.model, tokenizer, device="cpu", batch_size=8)


def test_qwen3_template_is_named_and_its_problem_said(qwen3_backend):
    problem = prefix_stability_problem(qwen3_backend.tokenizer)
    assert problem is not None and "\n" not in problem
    assert "drops the <think> block of an earlier assistant message" in problem and "env.context=per_turn" in problem


def test_prefix_stable_templates_pass(hf_backend):
    tokenizer = copy.deepcopy(hf_backend.tokenizer)
    assert prefix_stability_problem(tokenizer) is None  # the tiny model's ChatML template
    tokenizer.chat_template = trl_template("qwen3_training.jinja")  # TRL's prefix-preserving Qwen3 template
    assert prefix_stability_problem(tokenizer) is None


def test_a_generation_prompt_history_lacks_is_named(hf_backend):
    tokenizer = copy.deepcopy(hf_backend.tokenizer)
    tokenizer.chat_template = trl_template("deepseek_r1_distill.jinja")  # prefills "<think>\n", drops it in history
    problem = prefix_stability_problem(tokenizer)
    assert problem is not None and "its generation prompt" in problem and "\n" not in problem


@pytest.mark.parametrize("context, warnings", [("accumulated", 1), ("per_turn", 0)])
def test_rollout_engine_warns_once_for_accumulated_context(fake_factory, qwen3_backend, caplog, context, warnings):
    sampling = SamplingSettings(temperature=1.0, max_new_tokens=8, seed=0)
    settings = EpisodeSettings(mode="adaptive", context=context, max_steps=2)
    with EnvPool(fake_factory(), num_workers=1, step_timeout_s=60) as pool:
        engine = RolloutEngine(pool, qwen3_backend, qwen3_backend.tokenizer, sampling, max_prompt_tokens=4096)
        with caplog.at_level(logging.WARNING, logger="evoharness_rl.rollout.engine"):
            for _ in range(2):  # a second batch of the same engine does not repeat it
                trajs = engine.run([EpisodeJob("pick/2")], settings)
                assert all(t.error is None for t in trajs)
    lines = [r.getMessage() for r in caplog.records if r.name == "evoharness_rl.rollout.engine"]
    assert len(lines) == warnings
    assert all("not prefix-stable across turns" in line and "\n" not in line for line in lines)
