"""Edits that must earn their place (`experience.validate_edits`): after a consolidation cycle the policy plays the
held-out check tasks greedily with the old and the new bank; a cycle that lowers success by more than the margin is
rolled back (the bank exactly as before it), one that does not is kept; off by default; bad values fail in one line.

The trainer-level tests drive `trainer.consolidate` with a stand-in rollout engine whose episodes are won or lost
according to the bank they read (so the scores are known); the last test runs the real trainer on the tiny model."""

from __future__ import annotations

import functools
from types import SimpleNamespace

import pytest

from evoharness_rl.config import Config, ConfigError
from evoharness_rl.engines.base import SamplingSettings
from evoharness_rl.experience import ExperienceBank, Operation
from evoharness_rl.experience.cli import bank_log
from evoharness_rl.experience.consolidation import Proposal
from evoharness_rl.experience.history import read_history
from evoharness_rl.grpo import checkpoint as ckpt
from evoharness_rl.grpo import trainer
from evoharness_rl.grpo.build import Run, SilentLog, _task_lists
from evoharness_rl.rollout.trajectory import Trajectory

CHECK_TASKS = ["a/1", "a/2", "b/1", "b/2"]


class AddOne:
    """A consolidator that adds one general entry with the given principle (a fresh one each cycle)."""

    name = "scripted"

    def __init__(self, *principles: str):
        self.principles = list(principles)

    def propose(self, bank, evidence) -> Proposal:
        ops = [Operation("add", category="general", principle=self.principles.pop(0), task_types=("a", "b"),
                         evidence=(evidence.ref(0),))]
        return Proposal(operations=ops)


class SkipOnly(AddOne):
    def propose(self, bank, evidence) -> Proposal:
        return Proposal(operations=[Operation("skip", reason="nothing new")])


class BankReadingEngine:
    """Plays a job without an environment: task a/1 is lost when the bank holds an entry saying "harmful", every
    task when one says "ruinous"; the rest are won. Records what each call was played with."""

    def __init__(self):
        self.stats, self.sampling, self.calls = "the update's rollout stats", None, []

    def run(self, jobs, settings, experience=None, update_index=0):
        texts = " ".join(e.text for e in experience.entries)
        self.calls.append({"temperature": self.sampling.temperature, "max_steps": settings.max_steps,
                           "bank": experience.content_hash, "tasks": [j.task_id for j in jobs]})
        self.stats = "the check's stats"
        lost = lambda task: "ruinous" in texts or ("harmful" in texts and task == "a/1")  # noqa: E731
        return [Trajectory(task_id=j.task_id, family=j.task_id[0], env="fake", won=not lost(j.task_id)) for j in jobs]


def _run(tmp_path, consolidator, validate_edits=True, margin=0.0) -> Run:
    cfg = Config()
    cfg.experience.validate_edits, cfg.experience.validate_margin = validate_edits, margin
    cfg.env.max_steps_eval, cfg.env.max_steps_train = 7, 3
    bank = ExperienceBank()
    bank.apply([Operation("add", category="general", principle="Read the objective first.", task_types=("a", "b"))],
               "seed")
    acc = SimpleNamespace(num_processes=1, process_index=0, is_main_process=True)
    run = Run(cfg=cfg, accelerator=acc, plan=None, log=SilentLog(), model=None, tokenizer=None, reference=None,
              optimizer=None, scheduler=None, sampler=None, eval_tasks=[], state=ckpt.TrainerState(),
              out_dir=tmp_path, engine=BankReadingEngine(), base_sampling=SamplingSettings(temperature=1.0),
              bank=bank, consolidator=consolidator, edit_tasks=list(CHECK_TASKS))
    return run


def _batch() -> list[Trajectory]:
    return [Trajectory(task_id=f"a/{i}", family="a", env="fake", won=bool(i % 2), steps=2) for i in range(4)]


def test_a_cycle_that_lowers_success_is_rolled_back_with_the_bank_unchanged(tmp_path):
    run = _run(tmp_path, AddOne("Always do something ruinous.", "Check the count before stepping."))
    before = run.bank.content_hash()

    metrics = trainer.consolidate(run, _batch())

    assert run.bank.content_hash() == before and run.bank.update_index == 0  # as if the cycle never happened
    assert metrics["experience/rolled_back"] == 1.0
    assert metrics["experience/validate_old_success"] == 1.0 and metrics["experience/validate_new_success"] == 0.0
    assert metrics["experience/validate_episodes"] == 2 * len(CHECK_TASKS) and metrics["experience/validate_s"] >= 0
    assert metrics["experience/active_general"] == 1.0  # the bank that stayed, not the proposed one
    old, new = run.engine.calls
    assert old["bank"] == before != new["bank"]  # old bank first, then the cycle's
    for call in (old, new):  # greedy, eval step budget, the held-out tasks
        assert call["temperature"] == 0.0 and call["max_steps"] == 7 and call["tasks"] == CHECK_TASKS
    assert run.engine.stats == "the update's rollout stats"  # the update's metrics still describe its rollouts

    (cycle,) = read_history(tmp_path / "history.jsonl")
    assert cycle["status"] == "rolled_back" and cycle["edit_check"]["cycle_status"] == "ok"
    assert cycle["bank_before"] == cycle["bank_after"] == before and cycle["bank_proposed"] == new["bank"]
    assert cycle["edit_check"]["old_success"] == 1.0 and cycle["edit_check"]["new_success"] == 0.0
    assert cycle["operations"][0]["principle"] == "Always do something ruinous."  # what was tried stays readable
    run.bank.save(tmp_path / "bank.json")
    head = bank_log(tmp_path).splitlines()[1]
    assert head.startswith("cycle 1 (GRPO update 0) rolled_back") and head.endswith(
        "edit check: success 1.000 -> 0.000 on 4 held-out tasks, rolled back")

    run.state.update = 1
    metrics = trainer.consolidate(run, _batch())  # the next cycle takes the rolled-back cycle's number
    assert metrics["experience/rolled_back"] == 0.0 and run.bank.content_hash() != before
    assert [(c["cycle"], c["update"], c["status"]) for c in read_history(tmp_path / "history.jsonl")] == [
        (1, 0, "rolled_back"), (1, 1, "ok")]


def test_a_cycle_that_does_not_lower_success_is_kept(tmp_path):
    run = _run(tmp_path, AddOne("Check the count before stepping."))
    before = run.bank.content_hash()

    metrics = trainer.consolidate(run, _batch())

    assert metrics["experience/rolled_back"] == 0.0
    assert metrics["experience/validate_old_success"] == metrics["experience/validate_new_success"] == 1.0
    proposed = run.engine.calls[1]["bank"]
    assert run.bank.content_hash() == proposed != before and run.bank.update_index == 1
    (cycle,) = read_history(tmp_path / "history.jsonl")
    assert cycle["status"] == "ok" and cycle["bank_after"] == proposed and "bank_proposed" not in cycle
    assert cycle["edit_check"]["played"] and not cycle["edit_check"]["rolled_back"]


@pytest.mark.parametrize("margin, rolled_back", [(0.0, True), (0.25, False), (0.2, True)])
def test_the_margin_is_the_drop_a_cycle_may_cause(tmp_path, margin, rolled_back):
    run = _run(tmp_path, AddOne("A harmful habit."), margin=margin)  # loses one of the four tasks: 1.0 -> 0.75
    metrics = trainer.consolidate(run, _batch())
    assert metrics["experience/validate_new_success"] == 0.75
    assert metrics["experience/rolled_back"] == float(rolled_back)


def test_a_cycle_that_changes_nothing_visible_is_not_played(tmp_path):
    run = _run(tmp_path, SkipOnly())
    metrics = trainer.consolidate(run, _batch())
    assert run.engine.calls == [] and metrics["experience/validate_s"] == 0.0
    assert metrics["experience/rolled_back"] == 0.0 and "experience/validate_old_success" not in metrics
    (cycle,) = read_history(tmp_path / "history.jsonl")
    assert cycle["status"] == "ok" and not cycle["edit_check"]["played"]


def test_a_check_whose_episodes_all_errored_keeps_the_cycle():
    from evoharness_rl.experience.edit_check import EditCheck

    check = EditCheck.judge(4, [], [True, True], margin=0.0, wall_s=2.5)  # no evidence for the old bank
    assert not check.played and not check.rolled_back
    assert check.metrics() == {"experience/rolled_back": 0.0, "experience/validate_s": 2.5,
                               "experience/validate_episodes": 8.0}


def test_off_by_default_nothing_is_played_or_logged(tmp_path):
    assert Config().experience.validate_edits is False
    run = _run(tmp_path, AddOne("Always do something ruinous."), validate_edits=False)
    metrics = trainer.consolidate(run, _batch())
    assert run.engine.calls == [] and run.bank.update_index == 1  # the harmful edit stays: nothing checks it
    assert not [k for k in metrics if "validate" in k or "rolled_back" in k]
    (cycle,) = read_history(tmp_path / "history.jsonl")
    assert "edit_check" not in cycle


def test_the_held_out_tasks_are_left_out_of_training_every_family_in_turn():
    from tests.fakes.count import make_count_env

    _, train, _, held = _task_lists(make_count_env, None, 0, held_out=3)
    assert held == ["a/1-0", "b/1-0", "a/2-1"]
    assert not set(held) & set(train) and len(train) == 3
    assert _task_lists(make_count_env, None, 0)[3] == []  # off: every train task trains
    with pytest.raises(ConfigError, match=r"^experience\.validate_tasks=6 holds out every one of the 6 train tasks"):
        _task_lists(make_count_env, None, 0, held_out=6)


@pytest.mark.parametrize("override, message", [
    ("experience.validate_tasks=0", "experience.validate_tasks=0 must be > 0"),
    ("experience.validate_margin=1.5", "experience.validate_margin=1.5 must be between 0 and 1"),
])
def test_bad_values_fail_in_one_line(tmp_path, capsys, override, message):
    from evoharness_rl.cli import main

    with pytest.raises(SystemExit) as exit_info:
        main(["grpo", "experience.validate_edits=true", override, f"out_dir={tmp_path / 'run'}"])
    assert exit_info.value.code == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and message in err
    assert not (tmp_path / "run").exists()


@pytest.mark.slow
def test_the_real_trainer_checks_its_edits(warm_model_dir, tmp_path):
    """Two updates of the real trainer on the tiny model with the check on: its metrics and history lines appear,
    the held-out tasks never train, and the bank of every checkpoint is the one its history says stayed."""
    from evoharness_rl.runlog import read_metrics
    from tests.fakes.count import make_count_env, tiny_config

    cfg = tiny_config(warm_model_dir, tmp_path / "run", updates=2)
    cfg.experience.validate_edits, cfg.experience.validate_tasks = True, 2
    trainer.run_grpo(cfg, env_factory=functools.partial(make_count_env))

    rows = read_metrics(tmp_path / "run")
    assert len(rows) == 2
    assert "experience/validate_old_success" in rows[0]  # the first cycle adds to an empty bank: always played
    for row in rows:
        assert {"experience/rolled_back", "experience/validate_s", "experience/validate_episodes"} <= row.keys()
        played = "experience/validate_old_success" in row
        assert row["experience/validate_episodes"] == (4 if played else 0)
    cycles = read_history(tmp_path / "run" / "history.jsonl")
    assert [c["update"] for c in cycles] == [0, 1] and all("edit_check" in c for c in cycles)
    trained = {_task_of(p) for p in (tmp_path / "run" / "trajectories").glob("update_*/*.json")}
    assert trained and not trained & {"a/1-0", "b/1-0"}  # the held-out tasks
    final = ExperienceBank.load(tmp_path / "run" / "final" / "bank.json")
    assert final.content_hash() == cycles[-1]["bank_after"]


def _task_of(path) -> str:
    import json

    return json.loads(path.read_text())["task_id"]


@pytest.mark.slow
def test_two_processes_share_the_check_and_its_verdict(warm_model_dir, tmp_path):
    """torchrun with 2 CPU processes (gloo): 3 check tasks split 2 + 1 over the processes, outcomes gathered."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    from evoharness_rl.runlog import read_metrics

    root = Path(__file__).parents[2]
    code = tmp_path / "ddp.py"
    code.write_text(
        f"import sys; sys.path.insert(0, {str(root)!r}); import torch; torch.set_num_threads(1)\n"
        "from tests.fakes.count import run_count_grpo\n"
        "if __name__ == '__main__':\n"
        f"    run_count_grpo({str(warm_model_dir)!r}, {str(tmp_path / 'run')!r}, updates=2, tasks_per_family=4,\n"
        "                   experience={'validate_edits': True, 'validate_tasks': 3})\n"
    )
    torchrun = Path(sys.executable).with_name("torchrun")
    out = subprocess.run([str(torchrun), "--nproc_per_node", "2", "--master_port", "29519", str(code)],
                         env={**os.environ, "OMP_NUM_THREADS": "1"}, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    rows = read_metrics(tmp_path / "run")
    assert [r["episodes"] for r in rows] == [8, 8]
    assert "experience/validate_old_success" in rows[0]  # the first cycle adds to an empty bank: always played
    assert rows[0]["experience/validate_episodes"] == 6  # both processes' check episodes
    for row in rows:  # success over all three tasks: a multiple of 1/3, whichever process played them
        for key in ("experience/validate_old_success", "experience/validate_new_success"):
            assert key not in row or round(row[key] * 3, 6) == round(row[key] * 3)
    cycles = read_history(tmp_path / "run" / "history.jsonl")
    assert [c["edit_check"]["tasks"] for c in cycles if c["edit_check"]["played"]] == [3] * sum(
        "experience/validate_old_success" in r for r in rows)
    assert "5 train tasks (3 more held out for the edit check)" in (tmp_path / "run" / "run.log").read_text()

