"""WebArena end to end: the CLI in a real headless Chromium, malformed responses, the real-site backend's errors."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from evoharness_rl.eval.evaluate import evaluate
from test_eval_envs import SUMMARY_KEYS, compose_config, run_cli
from tests.fakes.processes import descendants, kill_and_expect_cleanup


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


@pytest.fixture(scope="module")
def _answering_server():
    """One loopback HTTP server for the module that answers 200 to everything. One for all tests, because
    browsergym-webarena copies the site URLs into module constants when first imported: a later test with
    another port would send the browser to a server that is gone."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Ok(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - the http.server hook
            body = b"<!doctype html><title>Stand-in</title><h1>Stand-in site</h1><a href='/next'>Next page</a>"
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Ok)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.fixture
def answering_sites(_answering_server, monkeypatch):
    """Every WA_* URL at the module's loopback server: the sites are up as far as the setup check sees."""
    from evoharness_rl.envs.webarena.real import SITE_VARS

    for var in SITE_VARS:  # and the unprefixed names browsergym-webarena copies them to (restored after the test)
        monkeypatch.setenv(var, _answering_server)
        monkeypatch.setenv(var.removeprefix("WA_"), _answering_server)
    yield


def test_real_backend_names_missing_nltk_data(answering_sites, monkeypatch, tmp_path):
    import nltk

    from evoharness_rl.envs.webarena.real import WebArenaSetupError, check_setup

    monkeypatch.setattr(nltk.data, "path", [str(tmp_path)])  # no punkt_tab anywhere NLTK looks
    with pytest.raises(WebArenaSetupError) as err:
        check_setup(timeout_s=2)
    message = str(err.value)
    assert "\n" not in message and message.startswith("NLTK data punkt_tab is missing")
    assert "python -m nltk.downloader punkt_tab" in message and "docs/webarena.md" in message


def test_real_backend_setup_passes_with_sites_data_and_package(answering_sites, monkeypatch, tmp_path):
    """The installed browsergym-webarena imports beside this project's transformers and registers WebArena's tasks."""
    import nltk
    import transformers

    from evoharness_rl.envs.webarena.real import SITE_VARS, check_setup

    (tmp_path / "tokenizers" / "punkt_tab").mkdir(parents=True)
    monkeypatch.setattr(nltk.data, "path", [str(tmp_path)])
    urls = check_setup(timeout_s=2)
    assert sorted(urls) == sorted(SITE_VARS) and transformers.__version__.startswith("5.")
    import browsergym.webarena

    assert len(browsergym.webarena.ALL_WEBARENA_TASK_IDS) == 812


def test_the_paper_subset_drops_backend_edit_tasks_and_uses_the_paper_columns():
    import importlib.resources

    import webarena

    from evoharness_rl.envs.webarena.real import paper_subset

    configs = json.loads(importlib.resources.files(webarena).joinpath("test.raw.json").read_text())
    edits = {c["task_id"] for c in configs if "program_html" in c["eval"]["eval_types"]}
    subset = paper_subset()
    assert edits and {t for t, _ in subset} == {c["task_id"] for c in configs} - edits
    families = dict(subset)
    assert set(families.values()) == {"SP", "CMS", "Maps", "G&R"}
    for conf in configs:
        if conf["task_id"] in families and conf["sites"][0] == "wikipedia":
            assert families[conf["task_id"]] == "Maps"  # Wikipedia's tasks go with the map they also use


def test_the_real_env_splits_the_subset_and_builds_webarena_tasks(answering_sites, monkeypatch, tmp_path):
    """Up to the browser: the env lists the paper subset by split and family, and browsergym-webarena builds a
    task of it from the installed task file with the configured site URLs."""
    import nltk

    from evoharness_rl.config import EnvConfig
    from evoharness_rl.envs.webarena.real import RealWebArenaEnv

    (tmp_path / "tokenizers" / "punkt_tab").mkdir(parents=True)
    monkeypatch.setattr(nltk.data, "path", [str(tmp_path)])
    cfg = EnvConfig(name="webarena")
    cfg.webarena.backend = "webarena"
    env = RealWebArenaEnv.from_config(cfg)
    test, train = env.task_ids("test"), env.task_ids("train")
    assert len(test) + len(train) == 401 and len(test) - len(train) in (0, 1) and env.task_ids("valid_seen") == test
    assert {env.task_family(t) for t in test} == {env.task_family(t) for t in train} == {"SP", "CMS", "Maps", "G&R"}
    env.close()
    cfg.webarena.real_task_ids = [27, 28, 29]  # three Reddit questions
    chosen = RealWebArenaEnv.from_config(cfg)
    listed = chosen.task_ids("test") + chosen.task_ids("train")
    assert sorted(int(k.rsplit("/", 1)[1]) for k in listed) == [27, 28, 29]
    assert {chosen.task_family(k) for k in listed} == {"G&R"}
    chosen.close()

    from browsergym.webarena.task import GenericWebArenaTask

    task = GenericWebArenaTask(seed=0, task_id=27)
    site = os.environ["WA_REDDIT"]
    assert task.task_configs[0]["intent"] and task.task_configs[0]["start_url"].startswith(site)


def test_a_real_backend_episode_on_a_stand_in_map_site(answering_sites, monkeypatch, tmp_path):
    """browsergym-webarena's reset (site login, start page, goal), a browser action and a stop scored by WebArena's
    own evaluator, in a real Chromium, with a loopback stand-in for the map site: task 70 asks for a zip code and is
    judged by exact match ('15213'), so the stand-in's pages need no content."""
    import nltk

    from evoharness_rl.config import EnvConfig
    from evoharness_rl.envs.webarena.real import RealWebArenaEnv

    (tmp_path / "tokenizers" / "punkt_tab").mkdir(parents=True)
    monkeypatch.setattr(nltk.data, "path", [str(tmp_path)])
    cfg = EnvConfig(name="webarena")
    cfg.webarena.backend, cfg.webarena.real_task_ids = "webarena", [70]
    env = RealWebArenaEnv.from_config(cfg)
    try:
        (key,) = env.task_ids("test")
        task, first = env.reset(key)
        assert task.family == "Maps" and "zip code of Carnegie Mellon University" in task.objective
        assert first.observation.startswith(f"URL: {os.environ['WA_MAP']}/") and "Stand-in site" in first.observation
        assert env.step("goto [http://example.com/]").invalid  # refused: not a configured site
        moved = env.step(f"click [{first.observation.split('] link')[0].rsplit('[', 1)[1]}]")
        assert not moved.invalid and "/next" in moved.observation.splitlines()[0]
        done = env.step("stop [15213]")
        assert done.done and done.won and done.score == 1.0
        env.reset(key)
        wrong = env.step("stop [15217]")
        assert wrong.done and not wrong.won and wrong.score == 0.0
    finally:
        env.close()


@pytest.mark.slow
@pytest.mark.parametrize("sig", ["SIGTERM", "SIGKILL"])
def test_a_killed_eval_leaves_no_browser_worker_or_site_process(webarena_data, tmp_path, sig):
    """The CLI's workers, their Playwright drivers and Chromiums all go when the CLI is killed."""
    import signal
    import time

    args = [f"{k}={v}" for k, v in webarena(webarena_data, tmp_path, policy="scripted").items() if k != "command"]
    proc = subprocess.Popen([sys.executable, "-m", "evoharness_rl", "eval", *args], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and not list((tmp_path / "trajectories").glob("*.json")):
            time.sleep(0.1)
        started = descendants(proc.pid)
        assert len(started) >= 4, "workers, drivers and Chromium processes should be running"
        kill_and_expect_cleanup(proc, started, getattr(signal, sig), wait_s=30, grace_s=20)
    finally:
        if proc.poll() is None:
            proc.kill()


@pytest.mark.slow
def test_the_whole_pipeline_runs_on_webarena(webarena_data, tmp_path):
    """collect -> sft -> grpo (accumulated context, horizon curriculum) -> eval at tiny scale on CPU (~2 min)."""
    from evoharness_rl.models import init_model

    model = init_model("tiny", tmp_path / "model", seed=0)
    common = [f"env.data_dir={webarena_data['env.data_dir']}", "env=webarena", "env.prompt_style=compact",
              "env.webarena.max_obs_tokens=200", "policy.max_prompt_tokens=1536", "policy.max_new_tokens=8",
              "env.num_workers=1", "logger.progress=false"]

    def cli(command: str, *args: str) -> None:
        done = subprocess.run([sys.executable, "-m", "evoharness_rl", command, *common, *args], capture_output=True,
                              text=True, timeout=600)
        assert done.returncode == 0, done.stderr[-3000:]

    cli("collect", "policy=scripted", "split=train", "limit=4", f"out_dir={tmp_path / 'collect'}")
    collected = json.loads((tmp_path / "collect" / "summary.json").read_text())
    assert collected["collection"]["successful"] == 4 and collected["context"] == "accumulated"
    cli("sft", f"model.path={model}", f"sft.data={tmp_path / 'collect'}", "sft.lora=false", "sft.epochs=1",
        "sft.max_seq_length=1536", "sft.validation_fraction=0.25", f"out_dir={tmp_path / 'sft'}")
    cli("grpo", f"model.path={tmp_path / 'sft' / 'merged'}", "policy=hf", "grpo.updates=2",
        "grpo.prompts_per_update=2", "grpo.group_size=2", "grpo.mini_batch_trajectories=4",
        "grpo.micro_batch_samples=2", "grpo.horizon_curriculum=[2,3]", "grpo.eval_every=0", "grpo.save_every=2",
        f"out_dir={tmp_path / 'grpo'}")
    metrics = [json.loads(line) for line in (tmp_path / "grpo" / "metrics.jsonl").read_text().splitlines()]
    updates = [m for m in metrics if "horizon" in m]
    assert [m["horizon"] for m in updates] == [2, 3] and all(m["errors"] == 0 for m in updates)
    assert (tmp_path / "grpo" / "final" / "config.json").exists()
    cli("eval", f"model.path={tmp_path / 'grpo' / 'final'}", "policy=hf", "limit=2", "env.max_steps_eval=2",
        f"out_dir={tmp_path / 'eval'}")
    summary = json.loads((tmp_path / "eval" / "summary.json").read_text())
    assert summary["episodes"] == 2 and summary["errors"] == 0 and summary["tokens_generated"] > 0
