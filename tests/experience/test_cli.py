"""`evoharness-rl consolidate` (offline, over saved trajectories) and the bank report."""

import json

import pytest

from evoharness_rl.config import Config
from evoharness_rl.errors import Refusal
from evoharness_rl.experience import ExperienceBank
from evoharness_rl.experience.cli import bank_report, consolidate_command, read_trajectories
from evoharness_rl.rollout.trajectory import write_jsonl
from tests.experience import synthetic


def make_cfg(tmp_path, trajectories, name="run", bank=None, window=8):
    cfg = Config(command="consolidate", out_dir=str(tmp_path / name))
    cfg.env.name = "alfworld"
    cfg.logger.progress = False
    cfg.experience.trajectories, cfg.experience.bank, cfg.experience.window = str(trajectories), bank, window
    return cfg


def test_consolidate_writes_bank_report_and_is_independent_of_file_layout(tmp_path):
    trajs = synthetic.batch(30, mistakes={"pick_and_place_simple": "put"})
    eval_dir = tmp_path / "eval_run"
    write_jsonl(eval_dir / "trajectories" / "shard0.jsonl", trajs[:17])
    write_jsonl(eval_dir / "trajectories" / "shard1.jsonl", trajs[17:])
    (eval_dir / "summary.json").write_text("{}")
    path = consolidate_command(make_cfg(tmp_path, eval_dir))
    out = path.parent
    bank = ExperienceBank.load(path)
    reports = json.loads((out / "consolidation_report.json").read_text())
    assert len(reports) == 4 and [r["update_index"] for r in reports] == [1, 2, 3, 4]  # ceil(30 / 8) batches
    assert bank.composition()["search"] == len(synthetic.PRIORS) and bank.update_index == 4
    assert "| updates | general | task-specific |" in (out / "bank_report.md").read_text()
    assert len((out / "metrics.jsonl").read_text().splitlines()) == 4

    single = tmp_path / "all.jsonl"
    write_jsonl(single, list(reversed(trajs)))
    again = ExperienceBank.load(consolidate_command(make_cfg(tmp_path, single, name="run2")))
    assert again.content_hash() == bank.content_hash()


def test_the_input_bank_is_never_modified(tmp_path):
    seed = tmp_path / "seed.json"
    ExperienceBank().save(seed)
    raw = seed.read_bytes()
    trajs = tmp_path / "t.jsonl"
    write_jsonl(trajs, synthetic.batch(6))
    path = consolidate_command(make_cfg(tmp_path, trajs, bank=str(seed)))
    assert seed.read_bytes() == raw and ExperienceBank.load(path).entries


def test_consolidate_errors_name_the_field_and_write_nothing(tmp_path):
    with pytest.raises(Refusal, match="experience.trajectories"):
        consolidate_command(_without_trajectories(tmp_path))
    with pytest.raises(Refusal, match="does not exist"):
        consolidate_command(make_cfg(tmp_path, tmp_path / "nowhere"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(Refusal, match="holds no trajectories"):
        consolidate_command(make_cfg(tmp_path, tmp_path / "empty"))
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("name,text", [("bad.jsonl", '{"task_id": "t"\n'), ("bad.json", "[1, {garbage")])
def test_a_damaged_trajectory_file_is_named(tmp_path, name, text):
    folder = tmp_path / "trajs"
    folder.mkdir()
    write_jsonl(folder / "good.jsonl", synthetic.batch(2))
    (folder / name).write_text(text)
    with pytest.raises(Refusal, match=f"{name} is not a trajectory file"):
        consolidate_command(make_cfg(tmp_path, folder))
    assert not (tmp_path / "run").exists()


def _without_trajectories(tmp_path):
    cfg = make_cfg(tmp_path, "x")
    cfg.experience.trajectories = None
    return cfg


def test_read_trajectories_accepts_json_records_too(tmp_path):
    trajs = synthetic.batch(3)
    (tmp_path / "one.json").write_text(json.dumps(trajs[0].to_dict()))
    (tmp_path / "many.json").write_text(json.dumps([t.to_dict() for t in trajs[1:]]))
    assert sorted(t.task_id for t in read_trajectories(tmp_path)) == sorted(t.task_id for t in trajs)


def test_bank_report_groups_history_into_rows_by_hand():
    history = [{"update": u, "ops": {"add": 20 - u, "update": u, "archive": 0, "skip": 1}, "pruned": 0, "failures": u % 2,
                "composition": {"general": u, "task": 2 * u, "mistakes": 1, "search": 3}} for u in range(1, 21)]
    history[0]["redirected"] = {"add_to_update": 1, "add_to_skip": 0}  # newer records count the bank's redirections
    lines = bank_report(history).splitlines()
    rows = [line for line in lines if line.startswith("| ") and line[2].isdigit()]
    assert len(rows) == 10  # 20 consolidations -> 10 rows of 2
    # updates 1-2: Add 19+18, Update 1+2, Skip 1+1, failures 1+0; composition at update 2
    assert rows[0] == "| 1-2 | 2 | 4 | 1 | 3 | 37 | 3 | 0 | 2 | 1 | 0 | 1 |"
    assert rows[-1] == "| 19-20 | 20 | 40 | 1 | 3 | 1 | 39 | 0 | 2 | 0 | 0 | 1 |"  # Add 1+0, Update 19+20


def test_bank_report_from_a_run_directory(tmp_path):
    bank = ExperienceBank()
    bank.save(tmp_path / "checkpoints" / "u10" / "bank.json")
    text = bank_report(tmp_path)
    assert "| (empty) | 0 | 0 | 0 |" in text and "(no consolidation recorded)" in text
    (tmp_path / "other").mkdir()
    with pytest.raises(FileNotFoundError, match="no bank.json"):
        bank_report(tmp_path / "other")


def test_a_bank_path_that_does_not_exist_is_refused(tmp_path):
    """A mistyped experience.bank must not silently start an empty bank (experience.bank=null does that)."""
    trajs = tmp_path / "t.jsonl"
    write_jsonl(trajs, synthetic.batch(8))
    missing = tmp_path / "new.json"
    with pytest.raises(Refusal, match=r"experience.bank='.*new.json' does not exist.*experience.bank=null"):
        consolidate_command(make_cfg(tmp_path, trajs, bank=str(missing)))
    assert not missing.exists() and not (tmp_path / "run").exists()
