"""`eval` with the memory baselines (experience.method=expel | reasoningbank): online windows, a frozen memory file,
resume, the real ALFWorld and WebShop adapters, and their rows in the report."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fake_eval import run
from test_eval_envs import compose_config, run_cli, webshop

from evoharness_rl.eval.evaluate import evaluate
from evoharness_rl.eval.report import report
from evoharness_rl.experience.history import read_history

METHODS = ("expel", "reasoningbank")
HEADINGS = {"expel": "INSIGHTS FROM PAST TASKS", "reasoningbank": "MEMORY ITEMS FROM PAST TASKS"}


def baseline(method: str, **overrides) -> dict:
    return {"experience.method": method, "harness.mode": "env_only", "experience.evolve": "online",
            "experience.window": 4, "experience.consolidator": "heuristic", **overrides}


def records(out: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted((out / "trajectories").glob("*.json"))]


def system_prompt(record: dict) -> str:
    return record["turns"][0]["messages"][0]["content"]


def check_online(out: Path, method: str, summary: dict, windows: int) -> None:
    """Window k read the memory after k cycles; the prompts of later windows hold it; one history line per cycle."""
    assert summary["errors"] == 0 and summary["experience"]["method"] == method
    bank = json.loads((out / "bank.json").read_text())
    assert bank["method"] == method and bank["cycle"] == windows
    saved = sorted((out / "experience").glob("bank_window*.json"))
    assert len(saved) == windows
    cycles = read_history(out / "history.jsonl")
    assert [c["cycle"] for c in cycles] == list(range(1, windows + 1)) and all(c["method"] == method for c in cycles)
    versions = [cycles[0]["bank_before"]] + [c["bank_after"] for c in cycles]
    played = records(out)
    assert {(r["bank_cycle"], r["bank_version"]) for r in played} <= {(k, versions[k]) for k in range(windows)}
    first = [r for r in played if r["bank_cycle"] == 0]
    later = [r for r in played if r["bank_cycle"] > 0]
    assert first and later
    assert all(HEADINGS[method] not in system_prompt(r) and not r["recalled_ids"] for r in first)
    assert any(HEADINGS[method] in system_prompt(r) and r["recalled_ids"] for r in later)


@pytest.mark.parametrize("method", METHODS)
def test_online_memory_on_the_fake_env_resumes_and_freezes(method, tmp_path, capsys):
    reference = run(tmp_path / "ref", **baseline(method))  # 18 episodes, windows of 4
    check_online(tmp_path / "ref", method, reference, windows=5)
    from evoharness_rl.experience.cli import bank_main

    bank_main(["log", str(tmp_path / "ref")])  # the cycles, with the method's own operations
    log = capsys.readouterr().out
    assert "5 consolidation cycles" in log and ("upvote" in log if method == "expel" else "skip" in log)
    again = run(tmp_path / "ref", **baseline(method))  # every record and window memory is reused
    for summary in (reference, again):
        summary.pop("wall_s"), summary["cost"].pop("wall_s"), (summary["cost"]["per_success"] or {}).pop("wall_s", 0)
    assert again == reference
    memory = tmp_path / "ref" / "bank.json"
    frozen = run(tmp_path / "frozen", **baseline(method, **{"experience.evolve": "frozen", "experience.bank": str(memory)}))
    final = json.loads(memory.read_text())["content_hash"]
    assert frozen["experience"]["bank_hash"] == frozen["experience"]["final_bank_hash"] == final
    played = records(tmp_path / "frozen")
    assert all(r["bank_version"] == final for r in played) and all(HEADINGS[method] in system_prompt(r) for r in played)
    assert not (tmp_path / "frozen" / "bank.json").exists()


def test_an_llm_endpoint_writes_the_memory_and_garbage_leaves_it_empty(tmp_path):
    """The real-run path: the method's prompts through the `openai` client to an HTTP endpoint (scripted answers)."""
    from tests.fakes.chat_server import ChatServer

    item = {"title": "Count the steps first", "description": "Plan the number of steps.", "content": "Do them in order."}
    server = ChatServer([json.dumps({"memory_items": [item]})] * 4 + ["I will not answer in JSON."] * 8)
    llm = {"experience.consolidator": "openai", "experience.base_url": server.url, "experience.model_name": "fake",
           "experience.api_key_env": "EVOHARNESS_TEST_NO_KEY", "experience.max_retries": 0, "limit": 2}
    try:
        summary = run(tmp_path / "rb", **baseline("reasoningbank", **llm))  # 4 episodes, windows of 4: one cycle
        assert summary["cost"]["consolidator_calls"] == 4 and len(server.requests) == 4
        assert all("TRAJECTORY:" in r["messages"][-1]["content"] for r in server.requests)
        memory = json.loads((tmp_path / "rb" / "bank.json").read_text())
        assert [i["title"] for i in memory["items"]] == ["Count the steps first"]  # three repeats skipped
        (cycle,) = read_history(tmp_path / "rb" / "history.jsonl")
        assert cycle["status"] == "ok" and cycle["prompt_tokens"] == 4 and cycle["applied"] == {"add": 1, "skip": 3}
        summary = run(tmp_path / "expel", **baseline("expel", **llm))  # every answer is garbage
        (cycle,) = read_history(tmp_path / "expel" / "history.jsonl")
        assert cycle["status"] == "failed" and cycle["failures"] and cycle["bank_after"] == cycle["bank_before"]
        memory = json.loads((tmp_path / "expel" / "bank.json").read_text())
        assert memory["insights"] == [] and memory["successes"] == []
    finally:
        server.close()


def test_a_memory_file_of_another_kind_is_refused_before_any_episode(tmp_path):
    run(tmp_path / "expel", **baseline("expel", limit=2))
    from evoharness_rl.experience.memory import MemoryFormatError

    with pytest.raises(MemoryFormatError, match="not a reasoningbank memory"):
        run(tmp_path / "rb", **baseline("reasoningbank", **{"experience.bank": str(tmp_path / "expel" / "bank.json")}))
    assert not list((tmp_path / "rb").glob("trajectories/*.json"))
    run(tmp_path / "empty", **baseline("expel", **{"experience.evolve": "frozen", "limit": 1}))
    assert "empty frozen memory plays plain ReAct" in (tmp_path / "empty" / "run.log").read_text()


def test_report_puts_the_baselines_beside_react_and_evoharness_base(tmp_path):
    runs = {"react": {"harness.mode": "env_only"}, "base": {"harness.mode": "always_on"},
            "expel": baseline("expel"), "rbank": baseline("reasoningbank")}
    for name, overrides in runs.items():
        run(tmp_path / name, limit=3, **overrides)
    text = report([tmp_path / name for name in runs])
    header = next(line for line in text.splitlines() if line.startswith("| Run"))
    assert header.startswith("| Run | Method | Mode | Policy |")
    for name, label in (("react", "ReAct"), ("base", "EvoHarness-Base"), ("expel", "ExpeL"), ("rbank", "ReasoningBank")):
        assert any(line.startswith(f"| {name} | {label} |") for line in text.splitlines()), label


# ------------------------------------------------------------------------- real adapters


@pytest.mark.parametrize("method", METHODS)
def test_webshop_eval_with_a_baseline_memory(method, webshop_data, tmp_path):
    overrides = webshop(webshop_data, tmp_path, policy="scripted", limit=6, **baseline(method, **{
        "experience.window": 2, "harness": "env_only", "logger.progress": "false"}))
    overrides.pop("harness.mode")
    if method == "expel":  # the CLI end to end (Hydra overrides, validation, eval)
        run_cli(overrides)
        summary = json.loads((tmp_path / "summary.json").read_text())
    else:
        summary = evaluate(compose_config(overrides))
    assert summary["episodes"] == 6 and summary["mode"] == "env_only" and summary["success_rate"] >= 0.95
    check_online(tmp_path, method, summary, windows=3)


@pytest.mark.slow  # real ALFWorld games (tens of seconds on 2 cores)
@pytest.mark.parametrize("method", METHODS)
def test_alfworld_eval_with_a_baseline_memory(method, alfworld_data, tmp_path):
    overrides = {"command": "eval", "env": "alfworld", "split": "valid_seen", "out_dir": str(tmp_path),
                 "env.num_workers": 2, "policy": "scripted", "harness": "env_only", "logger.progress": "false",
                 **alfworld_data, **baseline(method, **{"experience.window": 2})}
    overrides.pop("harness.mode")
    summary = evaluate(compose_config(overrides))
    assert summary["episodes"] == 6 and summary["success_rate"] >= 0.95
    check_online(tmp_path, method, summary, windows=3)
    memory = json.loads((tmp_path / "bank.json").read_text())
    assert memory["insights" if method == "expel" else "items"]
