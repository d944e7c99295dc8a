"""scripts/real_model_table.py grpo: the report of `scripts/real_model.sh grpo` from each backend's run directory."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.fakes.scripts import load_script

CONFIG = """policy:
  backend: {backend}
model:
  path: outputs/real_model/grpo/warm
grpo:
  lora_r: 16
  lora_alpha: 32
  learning_rate: 0.0005
  prompts_per_update: 8
  group_size: 8
  mini_batch_trajectories: 32
"""


def _run(path: Path, backend: str, train: list[float], val: list[float], sync: bool) -> None:
    path.mkdir(parents=True)
    (path / "config.yaml").write_text(CONFIG.format(backend=backend))
    rows = [{"step": -1, "update": -1, "val/success_rate": val[0]}]
    for u, (t, v) in enumerate(zip(train, val[1:])):
        row = {"step": u, "update": u, "success_rate": t, "val/success_rate": v, "invalid_rate": 0.0,
               "update_s": 10.0 + u, "rollout_s": 4.0, "train_s": 5.0, "sync_consolidate_s": 1.0 + u,
               "rollout_tokens_per_s": 100.0, "prompt_tokens": 800, "train_tokens_per_s": 300.0, "rss_gb": 2.0, "rss_peak_gb": 2.5 + u}
        if sync:
            row.update({"sync/engine_vs_trainer": 1e-5 * (u + 1), "sync/engine_change": 0.1 / (u + 1),
                        "optimizer_steps": 2})
        rows.append(row)
    (path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    path.with_suffix(".seconds").write_text("123\n")


def test_report_has_the_curves_costs_and_sync_check(tmp_path, capsys):
    _run(tmp_path / "vllm", "vllm", [0.4, 0.8, 0.95], [0.3, 0.7, 0.93, 1.0], sync=True)
    _run(tmp_path / "hf", "hf", [0.5, 0.92, 0.9], [0.3, 0.85, 0.8, 0.97], sync=False)
    load_script("real_model_table").main(["grpo", str(tmp_path / "vllm"), str(tmp_path / "hf"),
                                          "--json", str(tmp_path / "report.json")])
    report = json.loads((tmp_path / "report.json").read_text())
    vllm, hf = report["vllm"], report["hf"]
    assert vllm["updates"] == 3 and vllm["train_success"] == [0.4, 0.8, 0.95] and vllm["val_success"] == 1.0
    assert vllm["seconds_per_update"] == 11.0 and vllm["rss_peak_gb"] == 4.5 and vllm["wall_s"] == 123
    assert vllm["val_curve"] == [0.3, 0.7, 0.93, 1.0] and vllm["prompt_tokens_per_s"] == 200.0
    assert (vllm["updates_to_train_target"], vllm["updates_to_val_target"]) == (3, 2)
    assert (hf["updates_to_train_target"], hf["updates_to_val_target"]) == (2, 3)
    assert vllm["sync_engine_vs_trainer_max"] == pytest.approx(3e-5) and vllm["sync_engine_change_min"] == 0.1 / 3

    assert "sync_engine_vs_trainer_max" not in hf  # the hf backend shares the trainer's model: nothing to check
    assert vllm["settings"]["backend"] == "vllm" and hf["settings"]["learning_rate"] == 0.0005
    table = capsys.readouterr().out
    assert "| start | - | 0.30 | - | 0.30 |" in table and "| 3 | 0.95 | 1.00 | 0.90 | 0.97 |" in table
    assert "| vllm | 3 / 2 | 0.95 / 1.00 |" in table and "shares the trainer's model" in table


def test_an_update_without_a_step_is_left_out_of_the_smallest_change(tmp_path):
    _run(tmp_path / "vllm", "vllm", [0.5, 1.0], [0.3, 0.9, 1.0], sync=True)
    rows = [json.loads(line) for line in (tmp_path / "vllm" / "metrics.jsonl").read_text().splitlines()]
    rows[-1].update({"optimizer_steps": 0, "sync/engine_change": 0.0,  # every group tied: no step, nothing changed
                     "train_tokens_per_s": 0.0})
    (tmp_path / "vllm" / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    report = load_script("real_model_table").grpo_report(tmp_path / "vllm")
    assert report["sync_engine_change_min"] == 0.1 and report["update_tokens_per_s"] == 300.0
