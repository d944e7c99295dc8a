"""WebArena end to end: the CLI in a real headless Chromium, malformed responses, the real-site backend's errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from evoharness_rl.eval.evaluate import evaluate
from test_eval_envs import SUMMARY_KEYS, compose_config, run_cli


@pytest.fixture(scope="session")
def webarena_data(tmp_path_factory) -> dict:
    return {"env.data_dir": str(tmp_path_factory.mktemp("webarena_data"))}


def webarena(data, out, **overrides) -> dict:
    return {"command": "eval", "env": "webarena", "out_dir": str(out), "env.num_workers": 2,
            "logger.progress": "false", **data, **overrides}


def test_cli_scripted_eval_on_the_local_sites(webarena_data, tmp_path):
    done = run_cli(webarena(webarena_data, tmp_path, policy="scripted", limit=12))
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert SUMMARY_KEYS <= set(summary) and summary["env"] == "webarena" and summary["context"] == "accumulated"
    assert summary["episodes"] == 12 and summary["errors"] == 0 and summary["success_rate"] >= 0.9
    assert set(summary["per_family"]) <= {"shop", "admin", "forum"}
    assert len(list((tmp_path / "trajectories").glob("*.json"))) == 12
    assert json.loads(done.stdout)["episodes"] == 12


@pytest.mark.slow
def test_cli_scripted_eval_reaches_the_acceptance_bar_on_every_test_task(webarena_data, tmp_path):
    run_cli(webarena(webarena_data, tmp_path, policy="scripted"))
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["episodes"] >= 30 and summary["errors"] == 0 and summary["success_rate"] >= 0.9
    assert set(summary["per_family"]) == {"shop", "admin", "forum"}


MALFORMED = ["", "I would click the search box", "```\n```", "```\nclick [\n```", "```\nclick [99999]\n```",
             "```\ntype [11]\n```", "```\ngoto [http://elsewhere.example/]\n```", "```\nscroll [left]\n```",
             "```\ntrack []\n```", "\u202e\u200b" * 100, "```\n" + "x" * 5000 + "\n```", "```\nstop\n```",
             "<action>click [8]</action>", "```\ntab_focus [7]\n```", "```\npress [Hyper+x]\n```"]


def test_replay_of_malformed_responses_errors_no_episode(webarena_data, tmp_path):
    path = tmp_path / "replay.json"
    path.write_text(json.dumps(MALFORMED))
    cfg = compose_config(webarena(webarena_data, tmp_path / "out", policy="replay", limit=3,
                                  **{"policy.path": str(path), "env.max_steps_eval": len(MALFORMED)}))
    summary = evaluate(cfg)
    assert summary["errors"] == 0 and summary["episodes"] == 3 and summary["success_rate"] == 0.0
    assert summary["invalid_actions_per_episode"] == len(MALFORMED)


def test_real_backend_without_site_urls_is_a_one_line_error(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("WA_")}
    done = subprocess.run([sys.executable, "-m", "evoharness_rl", "eval", "env=webarena", "policy=scripted",
                           "env.webarena.backend=webarena", f"out_dir={tmp_path}"], capture_output=True, text=True,
                          env=env, timeout=300)
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: env.webarena.backend=webarena needs the WebArena site URLs")
    assert "WA_SHOPPING" in lines[0] and "docs/webarena.md" in lines[0]


def test_real_backend_names_an_unreachable_site(monkeypatch):
    from evoharness_rl.envs.webarena.real import SITE_VARS, WebArenaSetupError, check_setup

    for var in SITE_VARS:
        monkeypatch.setenv(var, "http://127.0.0.1:9")  # the discard port: nothing listens there
    with pytest.raises(WebArenaSetupError, match=r"WA_SHOPPING=http://127.0.0.1:9 does not answer"):
        check_setup(timeout_s=2)
