"""`eval harness.schedule=...`: the controls replay an unmodified run's calls as they say, end to end.

The policy is the fake env's scripted teacher (harness calls at rate 0.3, seeded per episode),
so the source run and every control are deterministic.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
from fake_eval import fake_config, run

from evoharness_rl.errors import UserError
from evoharness_rl.eval.evaluate import fingerprint, identity
from evoharness_rl.eval.report import report

SOURCE_SETTINGS = {"limit": 9}  # every task of the fake env (3 families x 1-3 steps), two episodes each


@pytest.fixture(scope="module")
def source(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("source") / "policy"
    summary = run(out, **SOURCE_SETTINGS)
    assert summary["errors"] == 0 and summary["harness_calls_per_episode"] > 0.5
    return out


def _records(out: Path) -> dict[tuple[str, int], dict]:
    records = (json.loads(p.read_text()) for p in sorted((out / "trajectories").glob("*.json")))
    return {(r["task_id"], r["seed"]): r for r in records}


def _calls(record: dict) -> list[tuple[int, str, str]]:
    """(step, verb, argument) of every harness call made; refused turns take no step."""
    out, step = [], 0
    for turn in record["turns"]:
        if turn["schedule"] == "refused":
            continue
        if turn["action_kind"] == "harness":
            out.append((step, turn["verb"], turn["action"]))
        step += 1
    return out


def _ablation(tmp_path, source, kind) -> tuple[dict, list[tuple[dict, dict, list, list]]]:
    """The control's summary, and per episode (its record, the source's, its calls, the source's calls)."""
    out = tmp_path / kind
    summary = run(out, **SOURCE_SETTINGS, **{"harness.schedule": kind, "harness.schedule_source": str(source)})
    assert summary["errors"] == 0 and summary["schedule"] == kind
    src = _records(source)
    return summary, [(r, src[key], _calls(r), _calls(src[key])) for key, r in _records(out).items()]


def test_timing_shuffle_moves_the_calls_within_each_episode(tmp_path, source):
    summary, episodes = _ablation(tmp_path, source, "timing_shuffle")
    movable = 0
    for record, original, mine, theirs in episodes:
        assert [c[1:] for c in mine] == [c[1:] for c in theirs]  # the same verbs and arguments, in order
        slots = original["steps"] - original["won"]  # the steps before the source's winning action
        assert all(step < slots for step, _, _ in mine)  # at steps of the same episode
        assert all(t["schedule"] == "injected" for t in record["turns"] if t["action_kind"] == "harness")
        if 0 < len(theirs) < slots:  # another placement exists: it is taken
            movable += 1
            assert [c[0] for c in mine] != [c[0] for c in theirs]
    assert movable > 0
    assert summary["harness_calls_per_episode"] == pytest.approx(json.loads(
        (source / "summary.json").read_text())["harness_calls_per_episode"])
    assert summary["refused_calls_per_episode"] > 0  # the teacher's own calls were refused, and cost no step


def test_type_shuffle_keeps_the_steps_and_permutes_the_verbs(tmp_path, source):
    _, episodes = _ablation(tmp_path, source, "type_shuffle")
    verbs_before, verbs_after, changed = Counter(), Counter(), 0
    for record, _, mine, theirs in episodes:
        assert [c[0] for c in mine] == [c[0] for c in theirs]  # the same steps
        verbs_before.update(c[1] for c in theirs)
        verbs_after.update(c[1] for c in mine)
        for (_, verb, arg), (_, old_verb, old_arg) in zip(mine, theirs):
            assert arg == (old_arg if verb == old_verb else record["objective"])
            changed += verb != old_verb
    assert verbs_after == verbs_before and changed > 0


def test_frequency_matched_makes_as_many_random_calls_per_episode(tmp_path, source):
    _, episodes = _ablation(tmp_path, source, "frequency_matched")
    different = 0
    for record, _, mine, theirs in episodes:
        assert len(mine) == len(theirs) == len(record["scheduled_calls"])
        assert all(arg == record["objective"] for _, _, arg in mine)
        different += mine != theirs
    assert different > 0


def test_a_schedule_ablation_is_deterministic_given_the_seed(tmp_path, source):
    first, _ = _ablation(tmp_path, source, "type_shuffle")
    records = _records(tmp_path / "type_shuffle")
    again = run(tmp_path / "again", **SOURCE_SETTINGS,
                **{"harness.schedule": "type_shuffle", "harness.schedule_source": str(source)})

    def timeless(recs):
        return {k: {**r, "wall_s": 0} for k, r in recs.items()}

    assert timeless(_records(tmp_path / "again")) == timeless(records)
    assert again["fingerprint"] == first["fingerprint"]
    plans = [json.loads((d / "schedule.json").read_text()) for d in (tmp_path / "type_shuffle", tmp_path / "again")]
    assert plans[0] == plans[1]
    other = run(tmp_path / "seed", **SOURCE_SETTINGS, seed=4,
                **{"harness.schedule": "type_shuffle", "harness.schedule_source": str(source)})
    assert other["fingerprint"] != first["fingerprint"]


def test_the_report_puts_the_controls_beside_the_policy(tmp_path, source):
    runs = [source] + [tmp_path / kind for kind in ("timing_shuffle", "frequency_matched")]
    for kind in ("timing_shuffle", "frequency_matched"):
        _ablation(tmp_path, source, kind)
    text = report(runs)
    rows = [line for line in text.splitlines() if line.startswith("| ") and "scripted" in line]
    assert len(rows) == 3  # one table: the policy and both controls
    assert rows[0].startswith("| policy | EvoHarness | adaptive | scripted |")
    assert rows[1].startswith("| timing_shuffle | EvoHarness | adaptive (timing_shuffle schedule) |")
    assert rows[2].startswith("| frequency_matched | EvoHarness | adaptive (frequency_matched schedule) |")


def test_unmodified_runs_keep_the_fingerprints_they_had_before_schedules(tmp_path):
    cfg = fake_config(tmp_path)
    before = fingerprint(cfg, "bank", "v1")
    assert not {"schedule", "schedule_source", "schedule_retries"} & set(identity(cfg)["harness"])
    cfg.harness.schedule_source, cfg.harness.schedule_retries = "runs/x", 5  # unused without a control
    assert fingerprint(cfg, "bank", "v1") == before
    cfg.harness.schedule = "timing_shuffle"
    assert fingerprint(cfg, "bank", "v1", "calls-a") not in (before, fingerprint(cfg, "bank", "v1", "calls-b"))


def test_the_site_marks_injected_and_refused_turns(tmp_path, source):
    from evoharness_rl.eval.view import build_site

    _ablation(tmp_path, source, "timing_shuffle")
    site = build_site([source, tmp_path / "timing_shuffle"], tmp_path / "site")
    pages = [p.read_text() for p in site.parent.rglob("*.html")]
    assert any("injected by the schedule" in p for p in pages) and any("refused off the schedule" in p for p in pages)
    assert any("adaptive (timing_shuffle schedule)" in p for p in pages)


def test_a_missing_or_mismatched_source_is_a_one_line_error(tmp_path, source):
    fewer = tmp_path / "fewer_tasks"
    run(fewer, limit=3)
    bad = {"missing": (tmp_path / "nowhere", {}, "holds no episode records"),
           "split": (source, {"split": "valid_unseen"}, "split 'valid_seen', this run needs 'valid_unseen'"),
           "tasks": (fewer, {}, "recorded on another task set"),
           "episodes": (source, {"episodes_per_task": 3}, "recorded on another task set")}
    for name, (path, overrides, message) in bad.items():
        settings = {**SOURCE_SETTINGS, **overrides}
        with pytest.raises(UserError) as err:
            run(tmp_path / name, **settings, **{"harness.schedule": "timing_shuffle",
                                                 "harness.schedule_source": str(path)})
        assert message in str(err.value) and "\n" not in str(err.value), name
        assert not (tmp_path / name / "trajectories").exists()
    scheduled = tmp_path / "scheduled"
    run(scheduled, **SOURCE_SETTINGS, **{"harness.schedule": "timing_shuffle", "harness.schedule_source": str(source)})
    with pytest.raises(UserError, match="schedule 'timing_shuffle', this run needs 'policy'"):
        run(tmp_path / "twice", **SOURCE_SETTINGS, **{"harness.schedule": "type_shuffle",
                                                      "harness.schedule_source": str(scheduled)})
