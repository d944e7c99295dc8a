"""Eval on the real ALFWorld engine (generated games): CLI, both contexts, replay, hf, kill-and-resume."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from test_eval_envs import SUMMARY_KEYS, compose_config, run_cli

from evoharness_rl.eval.evaluate import evaluate

pytestmark = pytest.mark.slow  # each test plays real ALFWorld games (tens of seconds on 2 cores)


def alfworld(data: dict, out, **overrides) -> dict:
    return {"command": "eval", "env": "alfworld", "split": "valid_seen", "out_dir": str(out), "env.num_workers": 2,
            "harness": "adaptive", "logger.progress": "false", **data, **overrides}


def test_cli_scripted_teacher_solves_the_games(alfworld_data, tmp_path):
    run_cli(alfworld(alfworld_data, tmp_path, policy="scripted"))
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert SUMMARY_KEYS <= set(summary)
    assert summary["episodes"] == 6 and summary["errors"] == 0 and summary["success_rate"] >= 0.95
    assert summary["harness_calls_per_episode"] > 0 and summary["invalid_actions_per_episode"] == 0
    records = [json.loads(p.read_text()) for p in (tmp_path / "trajectories").glob("*.json")]
    assert len(records) == 6
    turn = records[0]["turns"][0]
    assert {"response", "action", "action_kind", "observation", "harness_view"} <= set(turn)
    assert records[0]["won"] and records[0]["family"] in summary["per_family"]


def test_accumulated_context_and_malformed_replay(alfworld_data, tmp_path):
    cfg = compose_config(alfworld(alfworld_data, tmp_path / "acc", policy="scripted", **{"env.context": "accumulated"}))
    summary = evaluate(cfg)
    assert summary["errors"] == 0 and summary["success_rate"] >= 0.95 and summary["context"] == "accumulated"
    replay = tmp_path / "replay.json"
    replay.write_text(json.dumps(["", "<action>fly away</action>", "<think>hmm", "<action>take [</action>",
                                  "<action>go to the moon</action><action>look</action>"]))
    cfg = compose_config(alfworld(alfworld_data, tmp_path / "replay", policy="replay", limit=3,
                                  **{"policy.path": str(replay), "env.max_steps_eval": 6}))
    summary = evaluate(cfg)
    assert summary["errors"] == 0 and summary["episodes"] == 3 and summary["success_rate"] == 0.0
    assert summary["invalid_actions_per_episode"] == 6  # five malformed responses, then the list runs out ("")


@pytest.mark.parametrize("context", ["per_turn", "accumulated"])
def test_hf_policy_plays_alfworld(alfworld_data, tiny_model, tmp_path, context):
    cfg = compose_config(alfworld(alfworld_data, tmp_path, policy="hf", limit=2, **{
        "model.path": tiny_model, "env.context": context, "env.max_steps_eval": 2, "policy.max_new_tokens": 12}))
    summary = evaluate(cfg)
    assert summary["errors"] == 0 and summary["episodes"] == 2 and summary["tokens_generated"] > 0


def test_killed_cli_eval_resumes_to_the_same_summary(alfworld_data, tmp_path):
    slow = {"env.num_workers": 1, "env.max_live_episodes": 1}  # one episode at a time: easy to stop midway
    run_cli(alfworld(alfworld_data, tmp_path / "ref", policy="scripted", **slow))
    reference = json.loads((tmp_path / "ref" / "summary.json").read_text())
    out = tmp_path / "resumed"
    args = [f"{k}={v}" for k, v in alfworld(alfworld_data, out, policy="scripted", **slow).items() if k != "command"]
    proc = subprocess.Popen([sys.executable, "-m", "evoharness_rl", "eval", *args],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and len(list((out / "trajectories").glob("*.json"))) < 2:
        time.sleep(0.02)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    done = len(list((out / "trajectories").glob("*.json")))
    assert 2 <= done < 6 and not (out / "summary.json").exists()
    run_cli(alfworld(alfworld_data, out, policy="scripted", **slow))
    resumed = json.loads((out / "summary.json").read_text())
    for summary in (reference, resumed):  # everything but wall time
        summary.pop("wall_s"), summary["cost"].pop("wall_s"), (summary["cost"]["per_success"] or {}).pop("wall_s", 0)
    assert resumed == reference
