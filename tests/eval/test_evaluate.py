"""evaluate(): fixed task order, summary fields, per-episode records, fingerprints and resume."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from fake_eval import fake_config, fake_engine, run

from evoharness_rl.errors import UserError
from evoharness_rl.eval.evaluate import evaluate, fingerprint, summarize
from evoharness_rl.rollout.trajectory import Trajectory

HERE = Path(__file__).parent


def _records(out: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted((out / "trajectories").glob("*.json"))]


def test_summary_and_records(tmp_path):
    summary = run(tmp_path, limit=4)
    # the fake env lists pick/1, clean/1, heat/1, pick/2, ...: limit takes the first 4 tasks
    assert summary["tasks"] == 4 and summary["episodes"] == 8 and summary["errors"] == 0
    assert summary["success_rate"] == 1.0 and summary["score"] == 100.0
    assert summary["per_family"] == {
        "clean": {"success_rate": 1.0, "score": 100.0, "episodes": 2},
        "heat": {"success_rate": 1.0, "score": 100.0, "episodes": 2},
        "pick": {"success_rate": 1.0, "score": 100.0, "episodes": 4},
    }
    records = _records(tmp_path)
    assert len(records) == 8
    assert sorted({r["task_id"] for r in records}) == ["clean/1", "heat/1", "pick/1", "pick/2"]
    assert sorted({r["seed"] for r in records}) == [3, 4]  # seed + episode index
    calls = sum(sum(r["harness_calls"].values()) for r in records)
    assert summary["harness_calls_per_episode"] == pytest.approx(calls / 8, abs=1e-6)
    assert summary["steps"] == pytest.approx(sum(r["steps"] for r in records) / 8, abs=1e-6)
    assert sum(summary["harness_calls_by_verb"].values()) == pytest.approx(summary["harness_calls_per_episode"])
    assert all(r["fingerprint"] == summary["fingerprint"] for r in records)
    cost = summary["cost"]  # what the run cost, and what one success cost
    steps, calls = sum(r["steps"] for r in records), sum(sum(r["harness_calls"].values()) for r in records)
    assert cost["episodes"] == 8 and cost["successes"] == 8 and cost["harness_calls"] == calls
    assert cost["env_steps"] == steps - calls and cost["env_steps"] > 0
    assert cost["prompt_tokens"] is None and cost["generated_tokens"] is None  # a text-only backend counts no tokens
    assert cost["wall_s"] == pytest.approx(summary["wall_s"], abs=1e-3)
    assert cost["per_success"]["env_steps"] == pytest.approx((steps - calls) / 8, abs=1e-3)
    assert all(r["turns"][-1]["belief"] for r in records)  # the workspace after each turn is recorded
    on_disk = json.loads((tmp_path / "summary.json").read_text())
    assert on_disk == summary


def test_rerun_skips_recorded_episodes_and_replays_errored_ones(tmp_path):
    cfg = fake_config(tmp_path, limit=3)
    engine = fake_engine(fail_keys=("1",))  # the second episode's generation fails
    first = evaluate(cfg, engine=engine)
    assert first["errors"] == 1 and first["episodes"] == 5
    assert first["error_examples"] == ["generation failed: server down (503) after 4 retries"]
    engine = fake_engine()
    backend = engine.backend
    second = evaluate(cfg, engine=engine)
    assert second["errors"] == 0 and second["episodes"] == 6
    assert len(backend.batch_sizes) > 0 and max(backend.batch_sizes) == 1  # only the errored episode was played
    # another config (fingerprint) into the same out_dir is refused in one line, naming what differs
    before = {p.name: p.read_bytes() for p in (tmp_path / "trajectories").iterdir()}
    with pytest.raises(UserError) as refused:
        evaluate(fake_config(tmp_path, limit=3, **{"harness.mode": "env_only"}), engine=fake_engine())
    assert "harness.mode" in str(refused.value) and "\n" not in str(refused.value)
    assert {p.name: p.read_bytes() for p in (tmp_path / "trajectories").iterdir()} == before
    third = evaluate(fake_config(tmp_path / "other", limit=3, **{"harness.mode": "env_only"}), engine=fake_engine())
    assert third["fingerprint"] != second["fingerprint"] and third["harness_calls_per_episode"] == 0


def test_decoding_settings_are_part_of_the_fingerprint(tmp_path):
    hf = {"policy.backend": "hf", "model.path": str(tmp_path)}
    greedy = fingerprint(fake_config(tmp_path, **hf), "", "1")
    assert fingerprint(fake_config(tmp_path, **hf, **{"policy.temperature": 0.0}), "", "1") == greedy  # the default
    for knob, value in (("policy.temperature", 1.0), ("policy.top_p", 0.9), ("policy.max_new_tokens", 7)):
        assert fingerprint(fake_config(tmp_path, **hf, **{knob: value}), "", "1") != greedy, knob


def test_fingerprint_ignores_worker_counts_but_not_policy(tmp_path):
    base = fake_config(tmp_path)
    fp = fingerprint(base, "bank", "1")
    assert fingerprint(fake_config(tmp_path, **{"env.num_workers": 7, "env.max_live_episodes": 3}), "bank", "1") == fp
    assert fingerprint(fake_config(tmp_path, **{"policy.harness_rate": 0.9}), "bank", "1") != fp
    assert fingerprint(base, "other-bank", "1") != fp
    assert fingerprint(base, "bank", "2") != fp
    replay = fake_config(tmp_path, **{"policy.backend": "replay", "policy.path": str(tmp_path / "r.json")})
    (tmp_path / "r.json").write_text('["<action>look</action>"]')
    fp_replay = fingerprint(replay, "", "")
    (tmp_path / "r.json").write_text('["<action>step 1</action>"]')
    assert fingerprint(replay, "", "") != fp_replay


def test_errored_episodes_are_not_failures():
    ok = Trajectory(task_id="a", family="pick", env="fake", won=True, score=1.0, steps=3)
    lost = Trajectory(task_id="b", family="pick", env="fake", error="worker crashed")
    summary = summarize([ok, lost])
    assert summary["success_rate"] == 1.0 and summary["episodes"] == 1 and summary["errors"] == 1
    assert summarize([lost])["success_rate"] is None


def test_killed_eval_resumes_to_the_same_summary(tmp_path):
    reference = run(tmp_path / "ref")
    out = tmp_path / "resumed"
    proc = subprocess.Popen([sys.executable, str(HERE / "fake_eval.py"), str(out), "0.05"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and len(list((out / "trajectories").glob("*.json"))) < 4:
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    partial = len(list((out / "trajectories").glob("*.json")))
    assert 4 <= partial < reference["episodes"], "the eval must be killed midway"
    assert not (out / "summary.json").exists()
    resumed = run(out)
    for summary in (reference, resumed):  # everything but wall time
        summary.pop("wall_s"), summary["cost"].pop("wall_s"), summary["cost"]["per_success"].pop("wall_s")
    assert resumed == reference


def test_online_evolution_consolidates_per_window_and_resumes(tmp_path):
    overrides = {"experience.evolve": "online", "experience.window": 4, "experience.consolidator": "heuristic"}
    reference = run(tmp_path / "ref", **overrides)
    banks = sorted((tmp_path / "ref" / "experience").glob("bank_window*.json"))
    assert len(banks) == 5  # 18 episodes in windows of 4
    assert reference["experience"]["evolve"] == "online"
    from evoharness_rl.experience import ExperienceBank
    from evoharness_rl.experience.history import read_history

    versions = [ExperienceBank().content_hash()] + [json.loads(b.read_text())["content_hash"] for b in banks]
    played = {(r["bank_cycle"], r["bank_version"]) for r in _records(tmp_path / "ref")}
    assert played == {(k, versions[k]) for k in range(5)}  # window k read the bank after k consolidations
    cycles = read_history(tmp_path / "ref" / "history.jsonl")
    assert [c["cycle"] for c in cycles] == [1, 2, 3, 4, 5]
    assert [c["bank_after"] for c in cycles] == versions[1:] and [c["bank_before"] for c in cycles] == versions[:-1]
    assert all(c["episodes_seen"] == c["episodes_in_batch"] > 0 for c in cycles)
    # interrupt "after window 2": later records and banks are gone
    out = tmp_path / "resumed"
    import shutil

    shutil.copytree(tmp_path / "ref", out)
    records = sorted((out / "trajectories").glob("*.json"), key=lambda p: p.name)
    order = [json.loads(p.read_text())["task_id"] for p in records]
    assert len(order) == 18
    for bank in banks[2:]:
        (out / "experience" / bank.name).unlink()
    history = (out / "history.jsonl").read_text().splitlines(keepends=True)
    (out / "history.jsonl").write_text("".join(history[:2]))  # a window's line follows its saved bank
    late = [p for p in records if json.loads(p.read_text())["task_id"] in {"clean/3", "heat/3", "pick/3"}]
    for p in late:
        p.unlink()
    resumed = run(out, **overrides)
    for summary in (reference, resumed):  # everything but wall time
        summary.pop("wall_s"), summary["cost"].pop("wall_s"), (summary["cost"]["per_success"] or {}).pop("wall_s", 0)
    assert resumed == reference
    for bank in banks:
        resumed_bank = json.loads((out / "experience" / bank.name).read_text())
        assert resumed_bank["entries"] == json.loads(bank.read_text())["entries"]
    assert [c["bank_after"] for c in read_history(out / "history.jsonl")] == versions[1:]


def test_record_names_keep_the_start_of_the_task_id_and_stay_unique(tmp_path):
    from evoharness_rl.eval.evaluate import record_path
    from evoharness_rl.rollout.engine import EpisodeJob

    long_a = "valid_seen/pick_and_place_simple-" + "x" * 100 + "/trial_1"
    long_b = "valid_seen/pick_and_place_simple-" + "x" * 100 + "/trial_2"
    a, b = (record_path(tmp_path, EpisodeJob(t, seed=3), base_seed=3) for t in (long_a, long_b))
    assert a != b and a.name.startswith("valid_seen_pick_and_place_simple-") and a.name.endswith("-ep0.json")
