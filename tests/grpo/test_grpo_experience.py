"""The Experience bank as GRPO training state (issue acceptance): every episode read and the operations split
in metrics.jsonl, every kept trajectory stamped with its bank, checkpoints holding their bank and history, and
`evoharness-rl bank log` listing the cycles."""

from __future__ import annotations

import functools
import json

import pytest

from evoharness_rl.cli import main
from evoharness_rl.experience import ExperienceBank
from evoharness_rl.experience.history import read_history
from evoharness_rl.grpo import checkpoint as ckpt
from evoharness_rl.grpo.trainer import run_grpo
from evoharness_rl.runlog import read_metrics


@pytest.mark.slow
def test_two_updates_with_self_consolidation_keep_the_bank_as_training_state(warm_model_dir, tmp_path, capsys):
    from tests.fakes.count import make_count_env, tiny_config

    run_dir = tmp_path / "run"
    cfg = tiny_config(warm_model_dir, run_dir, updates=2)
    cfg.experience.consolidator, cfg.experience.max_new_tokens = "self", 16
    cfg.experience.max_prompt_chars = 1500  # the 8 episodes of an update do not fit one prompt: read in parts
    run_grpo(cfg, env_factory=functools.partial(make_count_env))

    rows = read_metrics(run_dir)
    assert len(rows) == 2
    for row in rows:
        assert row["experience/episodes_seen"] == row["experience/episodes_in_batch"] == 8
        for op in ("add", "update", "archive", "skip"):
            assert f"experience/chosen/{op}" in row and f"experience/applied/{op}" in row
        assert {"experience/redirected/add_to_update", "experience/redirected/add_to_skip"} <= row.keys()
        assert row["experience/llm_calls"] >= 2 and row["experience/prompt_tokens"] > 0
        assert not [k for k in row if "validate" in k or "rolled_back" in k]  # experience.validate_edits is off

    cycles = read_history(run_dir / "history.jsonl")
    assert [(c["cycle"], c["update"]) for c in cycles] == [(1, 0), (2, 1)]
    # the tiny policy's 16 tokens are never a whole JSON answer: each call failed, each said so, nothing applied
    assert all(c["status"] == "failed" and len(c["failures"]) == c["llm_calls"] for c in cycles)
    assert any("part 2/2" in failure for c in cycles for failure in c["failures"])  # a batch read in parts
    final = ExperienceBank.load(run_dir / "final" / "bank.json")
    assert cycles[-1]["bank_after"] == final.content_hash() and cycles[1]["bank_before"] == cycles[0]["bank_after"]

    files = sorted((run_dir / "trajectories").glob("update_*/*.json"))
    assert len(files) == 16  # grpo.keep_trajectories=null: every episode of both updates
    for path in files:
        record = json.loads(path.read_text())
        update = int(path.parent.name.split("_")[1])
        assert record["bank_version"] == cycles[update]["bank_before"] and record["bank_cycle"] == update
        assert record["turns"] and record["turns"][0]["completion_ids"] == []  # eval's record format, lean

    for checkpoint in ckpt.list_checkpoints(run_dir):  # each checkpoint: its bank and the history up to it
        state = ckpt.read_trainer_state(checkpoint)
        held = read_history(checkpoint / "history.jsonl")
        assert len(held) == state.update
        assert ExperienceBank.load(checkpoint / "bank.json").content_hash() == held[-1]["bank_after"]

    capsys.readouterr()
    main(["bank", "log", str(run_dir)])
    out = capsys.readouterr().out.splitlines()
    assert out[0].endswith("2 consolidation cycles")
    assert out[1].startswith("cycle 1 (GRPO update 0)") and "read 8/8 episodes" in out[1]
    assert any(line.startswith("cycle 2 (GRPO update 1)") for line in out)
