"""The openai consolidator end to end against a local OpenAI-compatible HTTP server.

The server is a real HTTP endpoint speaking the chat-completions protocol; what it answers
is scripted, so every operation and the garbage path are exercised through the real
`openai` client (retries included). The same path against a vLLM server on a tiny model
is in test_vllm_consolidator.py (slow).
"""

import json

import pytest

from evoharness_rl.config import ExperienceConfig
from evoharness_rl.experience import ExperienceBank, consolidate, make_consolidator
from evoharness_rl.experience.operations import Operation
from tests.experience import synthetic
from tests.fakes.chat_server import ChatServer


@pytest.fixture
def serve():
    servers = []

    def start(answers):
        servers.append(ChatServer(answers))
        return servers[-1]

    yield start
    for server in servers:
        server.close()


def config(url, fused=True):
    return ExperienceConfig(consolidator="openai", base_url=url, model_name="tiny", api_key_env="EVOHARNESS_TEST_NO_KEY",
                            fused=fused, max_retries=2, request_timeout_s=10)


def bank_with_entries():
    bank = ExperienceBank()
    bank.update_index = 1
    bank.apply([Operation("add", category="general", principle="old", task_types=("a", "b")),
                Operation("add", category="general", principle="stale", task_types=("a", "b"))], "seed")
    return bank


FAMILIES = ("pick_cool_then_place_in_recep", "pick_heat_then_place_in_recep")


def test_scripted_json_through_the_openai_client_applies_every_operation(serve):
    answer = "Thinking about the batch...\n" + json.dumps({"operations": [
        {"op": "add", "category": "general", "principle": "take, transform, move", "task_types": list(FAMILIES), "evidence": ["E1"]},
        {"op": "update", "id": "gen-001", "principle": "refined"},
        {"op": "archive", "id": "gen-002", "reason": "misleading"},
        {"op": "skip", "reason": "redundant"}],
        "search_priorities": [{"object": "kettle", "locations": ["stoveburner"], "evidence": ["E2"]}]})
    server = serve([answer])
    bank = bank_with_entries()
    consolidator = make_consolidator(config(server.url), "alfworld")
    report = consolidate(bank, synthetic.batch(4, families=FAMILIES), consolidator)
    assert report.ops == {"add": 2, "update": 1, "archive": 1, "skip": 1} and report.failure_count == 0
    assert report.source == "openai:tiny" and bank.entries["gen-003"].history[0]["source"] == "openai:tiny"
    assert bank.find("search", "kettle").principle == "Where to find kettle: stoveburner first"
    request = server.requests[0]
    assert request["model"] == "tiny" and request["temperature"] == 0.0 and request["max_tokens"] == 2048
    assert request["messages"][0]["content"].startswith("You are a helpful assistant. Reasoning may precede the FINAL output.")


def test_garbage_from_the_server_leaves_the_bank_unchanged_and_is_counted(serve):
    server = serve(["<think>hmm</think> I am a tiny model {{{ [[ ]", "", "!!!"])
    bank = bank_with_entries()
    before = bank.content_hash()
    report = consolidate(bank, synthetic.batch(4, families=FAMILIES), make_consolidator(config(server.url, fused=False), "alfworld"))
    assert len(report.failures) == 3 and sum(report.ops.values()) == 0  # 2 task + 1 general abstraction
    assert [e.principle for e in bank.active()] == ["old", "stale"]
    assert bank.content_hash() != before  # only the ops_history record and update index changed
    assert bank.ops_history[-1]["failures"] == 3


def test_server_errors_are_retried_by_the_client(serve):
    server = serve([503, json.dumps({"operations": [{"op": "skip", "reason": "nothing new"}]})])
    report = consolidate(bank_with_entries(), synthetic.batch(2, families=FAMILIES), make_consolidator(config(server.url), "alfworld"))
    assert len(server.requests) == 2 and report.ops["skip"] == 1 and report.failures == []


def test_an_unreachable_server_is_a_counted_failure(serve):
    server = serve([])
    url = server.url
    server.close()
    cfg = config(url)
    cfg.max_retries, cfg.request_timeout_s = 0, 2
    report = consolidate(bank_with_entries(), synthetic.batch(2, families=FAMILIES), make_consolidator(cfg, "alfworld"))
    assert len(report.failures) == 1 and "consolidator call failed" in report.failures[0]
