"""Consolidator factory and the frozen / online evaluation protocols."""

import pytest

from evoharness_rl.config import ExperienceConfig
from evoharness_rl.envs.alfworld.grounding import AlfworldGrounding
from evoharness_rl.experience import ExperienceBank, HeuristicConsolidator, LLMConsolidator, make_consolidator, make_evolution
from evoharness_rl.experience.consolidation import NoConsolidation
from evoharness_rl.experience.baselines import load_bank
from evoharness_rl.experience.evolution import FrozenEvolution, OnlineEvolution
from evoharness_rl.experience.grounding import GenericGrounding, load_grounding
from tests.experience import synthetic


def test_factory_builds_each_backend():
    assert isinstance(make_consolidator(ExperienceConfig(consolidator="none"), "alfworld"), NoConsolidation)
    heuristic = make_consolidator(ExperienceConfig(), "alfworld")
    assert isinstance(heuristic, HeuristicConsolidator) and isinstance(heuristic.grounding, AlfworldGrounding)
    assert isinstance(make_consolidator(ExperienceConfig(), "webarena").grounding, GenericGrounding)
    policy = make_consolidator(ExperienceConfig(consolidator="self", fused=True), "webshop", policy_generate=lambda m: "{}")
    assert isinstance(policy, LLMConsolidator) and policy.name == "self" and policy.fused and policy.task_noun == "product category"
    openai = make_consolidator(ExperienceConfig(consolidator="openai", base_url="http://127.0.0.1:9/v1", model_name="m"), "alfworld")
    assert openai.name == "openai:m" and openai.agent_description.startswith("an embodied household agent")


@pytest.mark.parametrize("cfg, message", [
    (ExperienceConfig(consolidator="self"), "needs the policy's generation backend"),
    (ExperienceConfig(consolidator="openai", base_url="http://127.0.0.1:9/v1"), "experience.model_name"),
    (ExperienceConfig(consolidator="openai", model_name="m", api_key_env="EVOHARNESS_NO_SUCH_KEY"), "EVOHARNESS_NO_SUCH_KEY"),
    (ExperienceConfig(consolidator="oracle"), "not valid"),
])
def test_factory_errors_name_the_missing_piece(cfg, message):
    with pytest.raises(ValueError, match=message):
        make_consolidator(cfg, "alfworld")


def test_grounding_loader_falls_back_to_generic():
    assert load_grounding("alfworld").name == "alfworld" and load_grounding("webshop").name == "webshop"
    assert load_grounding("no_such_env").name == "generic"


def test_frozen_protocol_never_changes_the_bank():
    bank = ExperienceBank()
    evolution = make_evolution(ExperienceConfig(evolve="frozen"), bank)
    assert isinstance(evolution, FrozenEvolution) and list(evolution.windows([1, 2, 3])) == [[1, 2, 3]]
    before = bank.content_hash()
    assert evolution.observe(synthetic.batch(8)) == [] and bank.content_hash() == before
    assert evolution.fingerprint() == {"experience": "frozen", "bank_hash": before}


def test_online_protocol_consolidates_between_windows_only(tmp_path):
    bank = ExperienceBank()
    cfg = ExperienceConfig(evolve="online", window=6)
    evolution = make_evolution(cfg, bank, HeuristicConsolidator(AlfworldGrounding()), save_path=tmp_path / "bank.json")
    assert isinstance(evolution, OnlineEvolution)
    tasks = list(range(14))
    windows = list(evolution.windows(tasks))
    assert [len(w) for w in windows] == [6, 6, 2]
    first = evolution.snapshot()
    episodes = synthetic.batch(14)
    assert evolution.observe(episodes[:4]) == [] and evolution.snapshot() is first  # window not complete yet
    reports = evolution.observe(episodes[4:8])  # 8 buffered -> one window of 6 consolidated, 2 wait
    assert len(reports) == 1 and reports[0].episodes == 6
    assert evolution.snapshot() is not first and len(evolution.snapshot()) > len(first)
    assert ExperienceBank.load(tmp_path / "bank.json").content_hash() == bank.content_hash()
    assert evolution.flush()[0].episodes == 2 and evolution.flush() == []
    assert evolution.fingerprint()["initial_bank_hash"] == ExperienceBank().content_hash()


def test_online_protocol_needs_a_consolidator_and_a_positive_window():
    with pytest.raises(ValueError, match="needs a consolidator"):
        make_evolution(ExperienceConfig(evolve="online"), ExperienceBank())
    with pytest.raises(ValueError, match="window=0"):
        OnlineEvolution(ExperienceBank(), NoConsolidation(), window=0)


def test_load_bank_uses_the_configured_capacity(tmp_path):
    ExperienceBank(capacity=80).save(tmp_path / "b.json")
    assert load_bank(ExperienceConfig(bank=str(tmp_path / "b.json"), capacity=5)).capacity == 5
    assert load_bank(ExperienceConfig(capacity=7)).entries == {}
