"""report(): Table-1/Table-3-style Markdown and PNG plots from run directories."""

from __future__ import annotations

import json

import pytest
from fake_eval import run

from evoharness_rl.eval.report import ReportError, report


def _summary(split: str, mode: str, rates: dict[str, float], calls: float) -> dict:
    per_family = {fam: {"success_rate": r, "score": 100 * r, "episodes": 10} for fam, r in rates.items()}
    return {"env": "alfworld", "split": split, "mode": mode, "policy": "hf", "model": "/ckpt/rl", "episodes": 60,
            "errors": 1, "success_rate": sum(rates.values()) / len(rates), "score": 50.0, "per_family": per_family,
            "harness_calls_per_episode": calls, "invalid_actions_per_episode": 0.5, "steps": 20.0}


def _write(tmp_path, name, summary=None, metrics=None):
    d = tmp_path / name
    d.mkdir()
    if summary:
        (d / "summary.json").write_text(json.dumps(summary))
    if metrics:
        (d / "metrics.jsonl").write_text("".join(json.dumps(m) + "\n" for m in metrics))
    return d


ALF = ["pick_and_place_simple", "look_at_obj_in_light", "pick_clean_then_place_in_recep",
       "pick_heat_then_place_in_recep", "pick_cool_then_place_in_recep", "pick_two_obj_and_place"]


def test_alfworld_tables_seen_unseen_and_plots(tmp_path):
    rates = dict(zip(ALF, [1, 0.9, 0.8, 0.7, 0.6, 0.5]))
    seen = _write(tmp_path, "rl_seen", _summary("valid_seen", "adaptive", rates, 3.25))
    unseen = _write(tmp_path, "rl_unseen", _summary("valid_unseen", "adaptive", dict(zip(ALF, [.5] * 6)), 2.0))
    metrics = [{"step": u, "success_rate": u / 10, "harness_calls_per_episode": 5 - u / 5} for u in range(5)]
    metrics.append({"step": 4, "val/success_rate": 0.4})
    grpo = _write(tmp_path, "grpo", metrics=metrics)
    out = tmp_path / "report"
    text = report([seen, unseen, grpo], out)
    lines = text.splitlines()
    header = next(line for line in lines if line.startswith("| Run"))
    assert "| Pick | Look | Clean | Heat | Cool | Pick2 | Avg. |" in header  # the paper's column order
    row = next(line for line in lines if line.startswith("| rl_seen"))
    assert "| 100.0 | 90.0 | 80.0 | 70.0 | 60.0 | 50.0 | 75.0 |" in row and "| 3.25 |" in row
    assert "## alfworld — valid_unseen (unseen)" in text
    pair = next(line for line in lines if line.startswith("| alfworld | EvoHarness | adaptive"))
    assert "| 75.0 | 50.0 | 3.25 | 2.00 |" in pair
    for png in ("success_alfworld_valid_seen.png", "success_alfworld_valid_unseen.png", "grpo_training.png"):
        assert (out / png).stat().st_size > 1000 and f"]({png})" in text
    assert (out / "report.md").read_text() == text


def test_report_of_a_real_eval_run_uses_its_families(tmp_path):
    run(tmp_path / "scripted", limit=3)
    text = report([tmp_path / "scripted"])
    header = next(line for line in text.splitlines() if line.startswith("| Run"))
    assert "| clean | heat | pick | Avg. |" in header
    assert "| scripted | EvoHarness | adaptive | scripted | 100.0 | 100.0 | 100.0 | 100.0 |" in text
    cost = next(line for line in text.splitlines() if line.startswith("| scripted | eval"))
    summary = json.loads((tmp_path / "scripted" / "summary.json").read_text())["cost"]
    # episodes, successes, prompt and generated tokens (none: a text policy), env steps, harness calls
    assert cost.startswith(f"| scripted | eval | 6 | 6 | – | – | {summary['env_steps']} | {summary['harness_calls']} |")


def test_bad_run_directories_are_named(tmp_path):
    with pytest.raises(ReportError, match="does not exist"):
        report([tmp_path / "missing"])
    (tmp_path / "empty").mkdir()
    with pytest.raises(ReportError, match="empty has no summary.json"):
        report([tmp_path / "empty"])
    with pytest.raises(ReportError, match="no run directories"):
        report([])


def test_cli_report_writes_markdown_and_plots(tmp_path):
    import subprocess
    import sys

    seen = _write(tmp_path, "seen", _summary("valid_seen", "adaptive", dict(zip(ALF, [1.0] * 6)), 1.0))
    out = tmp_path / "report"
    done = subprocess.run([sys.executable, "-m", "evoharness_rl", "report", f"runs=[{seen}]", f"out_dir={out}"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "| seen | EvoHarness | adaptive | hf (rl) | 100.0 |" in done.stdout
    assert (out / "report.md").exists() and (out / "success_alfworld_valid_seen.png").exists()
    missing = subprocess.run([sys.executable, "-m", "evoharness_rl", "report", f"runs=[{tmp_path / 'nope'}]",
                              f"out_dir={out}"], capture_output=True, text=True, timeout=120)
    assert missing.returncode == 1 and "does not exist" in missing.stderr


def test_learning_dynamics_of_two_grpo_runs(tmp_path):
    """Two runs (e.g. adaptive vs env_only): one overlaid dynamics figure and the updates-to-threshold table."""
    def metrics(val: list[float]) -> list[dict]:
        rows = [{"step": u, "success_rate": 0.1 * u, "steps_per_episode": 20 - u, "harness/recall_per_episode": 1.0,
                 "experience/chosen/add": 3.0 - u, "experience/chosen/update": float(u),
                 "experience/redirected/add_to_update": 1.0} for u in range(len(val))]
        for u, v in enumerate(val):
            rows.append({"step": u, "val/success_rate": v})
        return rows

    adaptive = _write(tmp_path, "adaptive", metrics=metrics([0.2, 0.35, 0.55]))
    env_only = _write(tmp_path, "env_only", metrics=metrics([0.1, 0.2, 0.32]))
    text = report([adaptive, env_only], tmp_path / "report")
    assert (tmp_path / "report" / "dynamics.png").stat().st_size > 1000 and "](dynamics.png)" in text
    lines = text.splitlines()
    assert "| adaptive | 20.0 | 55.0 | 2 | 3 |" in lines  # 30% first reached after update 2, 50% after 3
    assert "| env_only | 10.0 | 32.0 | 3 | not reached |" in lines


def test_seeds_of_one_setting_are_averaged(tmp_path):
    """Runs whose configs differ only in seed and out_dir: one mean line with a band, and an across-seeds table."""
    def run_dir(name: str, seed: int, mode: str, val: list[float]) -> object:
        d = _write(tmp_path, name, metrics=[{"step": u, "success_rate": 0.1, "val/success_rate": v}
                                             for u, v in enumerate(val)])
        (d / "config.yaml").write_text(f"command: grpo\nout_dir: {d}\nseed: {seed}\nharness:\n  mode: {mode}\n")
        return d

    runs = [run_dir("adaptive_seed0", 0, "adaptive", [0.2, 0.4]), run_dir("adaptive_seed1", 1, "adaptive", [0.1, 0.6]),
            run_dir("env_only_seed0", 0, "env_only", [0.1, 0.2])]
    text = report(runs, tmp_path / "report")
    assert (tmp_path / "report" / "dynamics.png").stat().st_size > 1000
    lines = text.splitlines()
    # Only adaptive has several seeds; env_only (another harness mode) is not folded into it.
    assert "| adaptive | 2 | 1: 15.0 (10.0-20.0); 2: 50.0 (40.0-60.0) |" in lines
    assert not any(line.startswith("| env_only | ") and "seeds" in line for line in lines)
    assert sum(line.startswith("| env_only") for line in lines) == 1  # its updates-to-threshold row only


def test_the_operations_panel_shows_the_consolidators_choices_and_the_redirections_apart(tmp_path):
    from evoharness_rl.eval.report import dynamics_figure, load_run

    new = _write(tmp_path, "new", metrics=[{"step": 0, "success_rate": 0.5, "experience/chosen/add": 4.0,
                                            "experience/redirected/add_to_update": 2.0}])
    old = _write(tmp_path, "old", metrics=[{"step": 0, "success_rate": 0.5, "experience/add": 3.0}])
    for run, expected in ((new, ["add", "redirected add->update"]), (old, ["add (applied)"])):
        fig = dynamics_figure([load_run(run)])
        ops = next(ax for ax in fig.axes if ax.get_title().startswith("Experience operations"))
        assert [line.get_label() for line in ops.get_lines()] == expected
        assert [list(line.get_ydata()) for line in ops.get_lines()][0] == [4.0 if run == new else 3.0]


def test_prompt_variants_are_told_apart(tmp_path):
    rates = dict(zip(ALF, [0.5] * 6))
    runs = []
    for variant in ("full", "stripped"):
        for split, calls in (("valid_seen", 3.0), ("valid_unseen", 2.0)):
            summary = {**_summary(split, "adaptive", rates, calls if variant == "full" else calls / 3),
                       "prompt_variant": variant}
            runs.append(_write(tmp_path, f"{variant}_{split}", summary))
    text = report(runs)
    assert "| stripped_valid_seen | EvoHarness | adaptive (stripped prompt) |" in text
    pairs = [line for line in text.splitlines() if line.startswith("| alfworld | EvoHarness | adaptive")]
    assert len(pairs) == 2 and any("| 3.00 | 2.00 |" in p for p in pairs) and any("| 1.00 | 0.67 |" in p for p in pairs)


# ------------------------------------------------------------------ paired comparison (demo table)


def test_paired_difference_of_identical_runs_is_zero():
    from evoharness_rl.eval.report import paired_difference

    runs = {"t1": 1.0, "t2": 0.0, "t3": 0.5}
    assert paired_difference(runs, dict(runs)) == {"diff": 0.0, "ci95": [0.0, 0.0], "tasks": 3}


def test_paired_difference_of_a_run_that_wins_every_task_is_one():
    from evoharness_rl.eval.report import paired_difference

    out = paired_difference({"t1": 1.0, "t2": 1.0}, {"t1": 0.0, "t2": 0.0, "t9": 1.0})  # t9: only one ran it
    assert out == {"diff": 1.0, "ci95": [1.0, 1.0], "tasks": 2}


def test_paired_difference_interval_by_hand():
    from evoharness_rl.eval.report import ReportError, paired_difference

    # differences per task: 1, 0, 0, 0 -> mean 0.25; a resample's mean is k/4 for k of its 4 picks landing on t1
    a, b = {"t1": 1.0, "t2": 1.0, "t3": 0.0, "t4": 0.0}, {"t1": 0.0, "t2": 1.0, "t3": 0.0, "t4": 0.0}
    out = paired_difference(a, b)
    # k ~ Binomial(4, 1/4): P(k=0) = 0.316 > 2.5%, so the low end is 0; P(k>=3) = 0.051 > 2.5% > P(k=4) = 0.004,
    # so the high end is 3/4
    assert out["diff"] == 0.25 and out["ci95"] == [0.0, 0.75]
    assert paired_difference(a, b) == out  # fixed seed: reproducible
    with pytest.raises(ReportError, match="no task in common"):
        paired_difference({"x": 1.0}, {"y": 0.0})


def test_per_task_success_averages_a_task_s_episodes_and_skips_errors(tmp_path):
    from evoharness_rl.eval.report import per_task_success

    folder = tmp_path / "eval" / "trajectories"
    folder.mkdir(parents=True)
    records = [("a", True, None), ("a", False, None), ("b", True, None), ("b", False, "env crashed")]
    for k, (task, won, error) in enumerate(records):
        (folder / f"{k}.json").write_text(json.dumps({"task_id": task, "won": won, "error": error}))
    assert per_task_success(tmp_path / "eval") == {"a": 0.5, "b": 1.0}


def test_demo_table_gives_every_grpo_row_its_difference_to_sft(tmp_path, capsys):
    from tests.fakes.scripts import load_script

    script = load_script("demo_table")
    won = {"untrained": [0, 0, 0, 0], "sft": [1, 0, 0, 0], "grpo": [1, 1, 1, 1]}  # per task t0..t3
    for model, bank in script.ROWS:
        for split in script.SPLITS:
            d = tmp_path / f"eval_{model}_{bank}_{split}"
            (d / "trajectories").mkdir(parents=True)
            (d / "summary.json").write_text(json.dumps({"success_rate": sum(won[model]) / 4, "episodes": 4,
                                                        "harness_calls_per_episode": 1.0,
                                                        "invalid_actions_per_episode": 2.0}))
            for t, w in enumerate(won[model]):
                (d / "trajectories" / f"t{t}.json").write_text(json.dumps({"task_id": f"t{t}", "won": bool(w)}))
    script.main(str(tmp_path))
    rows = json.loads((tmp_path / "report" / "table.json").read_text())
    grpo = [r for r in rows if r["model"] == "grpo"]
    assert len(grpo) == 4 and all("vs_sft" not in r for r in rows if r["model"] != "grpo")
    for row in grpo:  # differences 0, 1, 1, 1: mean 0.75
        assert row["vs_sft"]["diff"] == 0.75 and row["vs_sft"]["tasks"] == 4
        low, high = row["vs_sft"]["ci95"]
        assert 0.0 <= low < 0.75 < high <= 1.0
    assert "| none | +75.0 pts [" in capsys.readouterr().out
