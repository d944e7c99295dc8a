"""`policy=openai` through the real eval CLI, against a local vLLM OpenAI-compatible server (slow)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.vllm]


def test_openai_policy_plays_alfworld_against_a_local_server(local_openai_server, alfworld_data, tmp_path):
    url, model_name = local_openai_server
    overrides = {**alfworld_data, "env": "alfworld", "policy": "openai", "policy.base_url": url,
                 "policy.model_name": model_name, "policy.max_new_tokens": 16, "policy.api_key_env": "EVOHARNESS_NO_KEY",
                 "split": "valid_seen", "limit": 2, "env.max_steps_eval": 3, "out_dir": str(tmp_path)}
    done = subprocess.run([sys.executable, "-m", "evoharness_rl", "eval", *[f"{k}={v}" for k, v in overrides.items()]],
                          capture_output=True, text=True, timeout=600, env={**os.environ, "EVOHARNESS_NO_KEY": ""})
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads((tmp_path / "summary.json").read_text())
    # The random model answers garbage: every step is an invalid action, none an infrastructure error.
    assert summary["episodes"] == 2 and summary["errors"] == 0
    assert summary["steps"] == 3 and summary["invalid_actions_per_episode"] > 0
    records = [json.loads(p.read_text()) for p in sorted((tmp_path / "trajectories").glob("*.json"))]
    assert all(len(r["turns"]) == 3 and all(t["response"] for t in r["turns"]) for r in records)
