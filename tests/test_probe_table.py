"""scripts/probe_table.py: each probe's greedy success next to SFT's, as printed in docs/results.md."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.fakes.scripts import load_script


def _script():
    return load_script("probe_table")


def _summary(path: Path, success: float) -> None:
    path.mkdir(parents=True)
    (path / "summary.json").write_text(json.dumps({"success_rate": success, "harness_calls_per_episode": 1.5,
                                                   "invalid_actions_per_episode": 20.0}))


def test_rows_show_success_and_the_difference_to_sft(tmp_path, capsys):
    demo, probes = tmp_path / "demo", tmp_path / "exp"
    _summary(demo / "eval_sft_none_valid_seen", 0.1)
    _summary(demo / "eval_sft_none_valid_unseen", 0.2)
    _summary(probes / "a" / "eval_none_valid_seen", 0.15)
    _summary(probes / "a" / "eval_none_valid_unseen", 0.125)
    (probes / "a" / "grpo").mkdir()
    (probes / "a" / "grpo" / "metrics.jsonl").write_text('{"success_rate": 0.25}\n{"success_rate": 0.5}\n')
    _summary(probes / "unfinished" / "eval_none_valid_seen", 0.3)  # no valid_unseen yet: left out
    _script().main(str(probes), str(demo))
    out = capsys.readouterr().out
    assert "| SFT | 10.0% | 20.0% |" in out
    assert "| a | 15.0% (+5.0) | 12.5% (-7.5) | 1.50 | 20.00 | 0.25 0.50 |" in out
    assert "unfinished" not in out


def test_missing_sft_evaluations_name_the_fix(tmp_path):
    with pytest.raises(SystemExit, match="make demo"):
        _script().main(str(tmp_path / "exp"), str(tmp_path / "demo"))
