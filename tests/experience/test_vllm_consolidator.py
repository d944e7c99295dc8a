"""The openai consolidator against a real vLLM OpenAI-compatible server on a tiny local model (slow).

The tiny model is random, so its output is garbage: the bank must stay unchanged and every
failed stage must be counted. (Every operation through the same client path is covered
with scripted answers in test_llm_server.py.)
"""

from __future__ import annotations

import pytest

from evoharness_rl.config import ExperienceConfig
from evoharness_rl.experience import ExperienceBank, consolidate, make_consolidator
from evoharness_rl.experience.consolidation import Evidence
from evoharness_rl.experience.operations import Operation
from evoharness_rl.experience.prompts import EvidenceView
from tests.experience import synthetic

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def vllm_url(local_openai_server):
    return local_openai_server[0]


@pytest.mark.parametrize("fused", [True, False])
def test_tiny_model_garbage_leaves_the_bank_unchanged_and_is_counted(vllm_url, fused):
    bank = ExperienceBank()
    bank.update_index = 1
    bank.apply([Operation("add", category="general", principle="keep me", task_types=("a", "b"))], "seed")
    cfg = ExperienceConfig(consolidator="openai", base_url=vllm_url, model_name="tiny", fused=fused,
                           max_new_tokens=64, max_prompt_chars=3000, api_key_env="EVOHARNESS_TEST_NO_KEY")
    trajectories = synthetic.batch(4, families=("pick_cool_then_place_in_recep", "pick_heat_then_place_in_recep"))
    report = consolidate(bank, trajectories, make_consolidator(cfg, "alfworld"))
    view = EvidenceView(Evidence.from_trajectories(trajectories, 2), cfg.max_prompt_chars)  # the parts read
    everything = view.mixed(list(range(4)))
    parts = len(view.chunks(everything)) + (0 if fused else sum(
        len(view.chunks([p for p, _ in view.evidence.of_family(f)])) for f in view.evidence.families))
    assert report.llm_calls == parts and report.episodes_seen == 4  # garbage candidates: nothing to reconcile
    assert report.failure_count >= 1 and sum(report.ops.values()) == 0, report.to_dict()
    assert [e.principle for e in bank.active()] == ["keep me"]
    assert bank.ops_history[-1]["failures"] == report.failure_count
