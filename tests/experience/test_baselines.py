"""The memory baselines (ExpeL, ReasoningBank): stores, update steps (rules and LLM), retrieval, bad input."""

from __future__ import annotations

import json
import pickle

import pytest

from evoharness_rl.config import ExperienceConfig
from evoharness_rl.envs.alfworld.grounding import AlfworldGrounding
from evoharness_rl.experience import ExperienceBank, make_consolidator
from evoharness_rl.experience.expel import ExpeLMemory, ExpeLUpdater
from evoharness_rl.experience.baselines import load_bank
from evoharness_rl.experience.memory import MemoryFormatError, NoUpdate, update_memory
from evoharness_rl.experience.reasoningbank import ReasoningBankMemory, ReasoningBankUpdater
from tests.experience import synthetic
from tests.fakes.consolidator import Scripted

SIMPLE, HEAT = "pick_and_place_simple", "pick_heat_then_place_in_recep"
ALF = AlfworldGrounding()


def rules(method: str):
    return ExpeLUpdater(ALF, None, "heuristic") if method == "expel" else ReasoningBankUpdater(ALF, None, "heuristic")


def llm(method: str, answers):
    fake = Scripted(answers)
    cls = ExpeLUpdater if method == "expel" else ReasoningBankUpdater
    return cls(ALF, fake, "openai:fake"), fake


def store(method: str):
    return ExpeLMemory() if method == "expel" else ReasoningBankMemory()


def episodes():
    """Successes of two families, and a failure of each kind ('put' instead of 'move'; wandering out of steps)."""
    wins = [synthetic.episode(SIMPLE, "mug", 1), synthetic.episode(SIMPLE, "kettle", 2),
            synthetic.episode(HEAT, "apple", 3)]
    put = synthetic.episode(SIMPLE, "mug", 4, mistake="put", max_steps=30)
    wander = synthetic.episode(HEAT, "apple", 5, mistake="wander", max_steps=12)
    assert all(t.won for t in wins) and not put.won and not wander.won
    return wins + [put, wander]


# ------------------------------------------------------------------------------- stores


@pytest.mark.parametrize("method", ["expel", "reasoningbank"])
def test_store_round_trip_and_damaged_files(method, tmp_path):
    memory = store(method)
    update_memory(memory, episodes(), rules(method))
    assert memory.size() > 0 and memory.update_index == 1
    path = tmp_path / "bank.json"
    memory.save(path)
    loaded = type(memory).load(path)
    assert loaded.to_dict() == memory.to_dict() and loaded.content_hash() == memory.content_hash()
    cfg = ExperienceConfig(method=method, bank=str(path), capacity=7, memory_k=2)
    assert load_bank(cfg).capacity == 7 and load_bank(cfg).view["k"] == 2
    data = json.loads(path.read_text())
    name = type(memory).LISTS[0]
    data[name][0]["id"] = "X9" if data[name] else None
    path.write_text(json.dumps(data))
    with pytest.raises(MemoryFormatError, match="content hash mismatch"):
        type(memory).load(path)
    path.write_text('{"method": "' + method)
    with pytest.raises(MemoryFormatError, match="not valid JSON"):
        type(memory).load(path)
    other = ReasoningBankMemory if method == "expel" else ExpeLMemory
    other().save(path)
    with pytest.raises(MemoryFormatError, match=f"not a {method} memory"):
        type(memory).load(path)
    ExperienceBank().save(tmp_path / "evo.json")
    with pytest.raises(MemoryFormatError, match="is an EvoHarness Experience bank"):
        type(memory).load(tmp_path / "evo.json")
    with pytest.raises(FileNotFoundError, match="does not exist"):
        type(memory).load(tmp_path / "missing.json")


# ------------------------------------------------------------------------- rule updates


def test_expel_rules_induce_insights_pool_successes_and_vote():
    memory = ExpeLMemory()
    report = update_memory(memory, episodes(), rules("expel"))
    assert report.status == "ok" and report.episodes == report.episodes_seen == 5
    assert {s["task_id"] for s in memory.successes} == {t.task_id for t in episodes() if t.won}
    texts = [i["text"] for i in memory.insights]
    assert any(t.startswith("For pick and place simple tasks, a procedure that worked:") and "move" in t for t in texts)
    assert any("In pick and place simple tasks, avoid" in t and "move X to Y" in t for t in texts)  # put vs move
    assert all(i["votes"] == 2 for i in memory.insights) and report.ops["store"] == 3
    before = {i["id"]: i["votes"] for i in memory.insights}
    again = update_memory(memory, episodes(), rules("expel"))  # the same evidence confirms: upvotes, no new insights
    assert again.ops.get("add", 0) == 0 and again.ops["upvote"] == len(before)
    assert {i["id"]: i["votes"] for i in memory.insights} == {k: v + 1 for k, v in before.items()}
    assert len(memory.successes) == 3  # one per task
    # an insight shown only to failing episodes loses votes until it is removed
    victim = next(i for i in memory.insights if i["text"].startswith("For pick and place simple tasks"))
    failed = [synthetic.episode(SIMPLE, "mug", 9, mistake="put", max_steps=20)]
    failed[0].recalled_ids = [victim["id"]]
    for _ in range(victim["votes"]):
        update_memory(memory, failed, rules("expel"))
    assert victim["id"] not in {i["id"] for i in memory.insights}


def test_reasoningbank_rules_distill_successes_and_failures():
    memory = ReasoningBankMemory()
    report = update_memory(memory, episodes(), rules("reasoningbank"))
    assert report.status == "ok" and report.episodes_seen == 5
    outcomes = {i["outcome"] for i in memory.items}
    assert outcomes == {"success", "failure"}
    assert all(set(i) >= {"title", "description", "content"} and i["title"] for i in memory.items)
    assert any("move X to Y" in i["content"] for i in memory.items if i["outcome"] == "failure")
    size = memory.size()
    again = update_memory(memory, episodes(), rules("reasoningbank"))
    assert memory.size() == size and again.ops.get("skip", 0) > 0 and "add" not in again.ops  # nothing new
    memory.capacity = 2
    update_memory(memory, [synthetic.episode(HEAT, "kettle", 11, mistake="put", max_steps=30)], rules("reasoningbank"))
    assert memory.size() == 2 and memory.items[-1]["cycle"] == 3  # the oldest were pruned


# ---------------------------------------------------------------------------- retrieval


def test_expel_retrieves_insights_and_the_most_similar_success():
    memory = ExpeLMemory()
    memory.view = {"k": 1, "max_insights": 1, "max_example_chars": 200}
    update_memory(memory, episodes(), rules("expel"))
    snapshot = pickle.loads(pickle.dumps(memory.snapshot()))  # as the env workers receive it
    text, ids = snapshot.prompt_context("put a kettle in shelf.", SIMPLE)
    kettle = next(s for s in memory.successes if "kettle" in s["objective"])
    best = memory.ranked_insights()[0]
    assert ids == [best["id"], kettle["id"]]
    assert best["text"] in text and "Task: put a kettle in shelf." in text and "chars cut]" in text
    assert snapshot.content_hash == memory.content_hash() and snapshot.cycle == 1
    assert ExpeLMemory().snapshot().prompt_context("put a kettle in shelf.", SIMPLE) == ("", [])


def test_reasoningbank_retrieves_items_by_similarity():
    memory = ReasoningBankMemory()
    update_memory(memory, episodes(), rules("reasoningbank"))
    memory.view = {"k": 2}
    text, ids = pickle.loads(pickle.dumps(memory.snapshot())).prompt_context("heat an apple and put it in shelf.", HEAT)
    items = {i["id"]: i for i in memory.items}
    assert len(ids) == 2 and all(items[i]["family"] == HEAT for i in ids)
    assert text.startswith("MEMORY ITEMS") and all(items[i]["title"] in text for i in ids)


# ---------------------------------------------------------------------------- LLM updates


def test_expel_llm_compares_pairs_and_groups_and_applies_its_operations():
    answers = [{"operations": [{"op": "add", "text": "Place objects with move, not put."}]},  # pair: put vs move
               {"operations": [{"op": "add", "text": "Search every receptacle once."}]},  # pair: wander
               {"operations": [{"op": "upvote", "id": "I1"}, {"op": "edit", "id": "I2", "text": "Search each place once."},
                               {"op": "downvote", "id": "I77"}]},  # group of heat successes
               {"operations": [{"op": "downvote", "id": "I2"}, {"op": "add", "text": "Take the object before moving."}]}]
    updater, fake = llm("expel", answers)
    memory = ExpeLMemory()
    report = update_memory(memory, episodes(), updater)
    assert report.llm_calls == 4 and report.status == "partial" and report.episodes_seen == 5
    assert any("unknown insight id 'I77'" in r for r in report.rejected)
    assert "SUCCESSFUL ATTEMPT" in fake.prompts[0] and "FAILED ATTEMPT" in fake.prompts[0]
    assert "I1 (2): Place objects with move, not put." in fake.prompts[2]  # later calls see earlier edits
    insights = {i["id"]: (i["text"], i["votes"]) for i in memory.insights}
    assert insights == {"I1": ("Place objects with move, not put.", 3), "I2": ("Search each place once.", 2),
                        "I3": ("Take the object before moving.", 2)}


def test_reasoningbank_llm_extracts_items_per_episode():
    item = {"title": "Check receptacles in order", "description": "Search systematically.", "content": "Open each."}
    updater, fake = llm("reasoningbank", lambda prompt: {"memory_items": [item, {"title": "no content"}]})
    memory = ReasoningBankMemory()
    report = update_memory(memory, episodes(), updater)
    assert report.llm_calls == 5 and len(fake.prompts) == 5
    assert sum("SUCCESSFULLY" in p for p in fake.prompts) == 3 and sum("FAILED" in p for p in fake.prompts) == 2
    assert [i["title"] for i in memory.items] == ["Check receptacles in order"]  # the rest repeat it: skipped
    assert report.ops == {"add": 1, "skip": 4} and len(report.rejected) == 5  # one item without fields per answer


@pytest.mark.parametrize("method", ["expel", "reasoningbank"])
@pytest.mark.parametrize("answer", ["I cannot help with that.", '{"operations": [{"op": "add", "text": "cut', 
                                    RuntimeError("endpoint down"), {"unexpected": 1}])
def test_bad_llm_output_leaves_the_memory_unchanged(method, answer):
    memory = store(method)
    update_memory(memory, episodes()[:2], rules(method))  # some memory to keep
    before = memory.to_dict()
    updater, _ = llm(method, lambda prompt: answer)
    report = update_memory(memory, episodes(), updater)
    assert report.status == "failed" and report.failures and report.ops == {}
    assert {k: v for k, v in memory.to_dict().items() if k != "cycle"} == {k: v for k, v in before.items() if k != "cycle"}
    assert report.bank_hash == report.bank_before == memory.content_hash()


def test_the_consolidator_registry_builds_the_methods_update_steps():
    cfg = ExperienceConfig(method="expel", consolidator="heuristic")
    assert isinstance(make_consolidator(cfg, "alfworld"), ExpeLUpdater)
    cfg = ExperienceConfig(method="reasoningbank", consolidator="self")
    updater = make_consolidator(cfg, "webshop", policy_generate=lambda messages: "{}")
    assert isinstance(updater, ReasoningBankUpdater) and updater.generate is not None and updater.name == "self"
    assert isinstance(make_consolidator(ExperienceConfig(method="expel", consolidator="none"), "alfworld"), NoUpdate)


# -------------------------------------------------------------------------------- config


def test_the_method_is_checked_when_the_config_is_read():
    from evoharness_rl.config import Config, ConfigError, validate

    cfg = Config(out_dir="x")
    cfg.experience.method, cfg.harness.mode = "expel", "env_only"
    assert validate(cfg).experience.method == "expel"
    cfg.experience.method = "memgpt"
    with pytest.raises(ConfigError, match=r"experience\.method='memgpt' is not valid; allowed values: evoharness, expel, "
                                          r"reasoningbank"):
        validate(cfg)
    cfg.experience.method, cfg.harness.mode = "reasoningbank", "adaptive"
    with pytest.raises(ConfigError, match="set harness.mode=env_only"):
        validate(cfg)
    cfg.harness.mode, cfg.command = "env_only", "grpo"
    with pytest.raises(ConfigError, match="only `eval` runs"):
        validate(cfg)
    cfg.command, cfg.experience.memory_k = "eval", 0
    with pytest.raises(ConfigError, match=r"experience\.memory_k"):
        validate(cfg)
