"""Bad input ends in one clear line (plus at most a hint line), and nothing in out_dir or the bank changes.

Each case runs the real CLI (`evoharness_rl.cli.main`) in this process, except the check
that invalid overrides fail before torch or an environment is imported, which needs a
fresh interpreter.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from evoharness_rl.cli import main, split_flags
from evoharness_rl.fileio import LOCK_FILE, OutDirBusy, out_dir_lock
from evoharness_rl.models import CheckpointError, check_checkpoint

ROOT = Path(__file__).resolve().parent.parent


def run_cli(args: list[str], capsys) -> tuple[int, list[str], str]:
    """(exit code, stderr lines, stdout) of `evoharness-rl ARGS`."""
    capsys.readouterr()
    try:
        main(args)
        code = 0
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else 1
    out, err = capsys.readouterr()
    return code, [line for line in err.splitlines() if line.strip()], out


def snapshot(folder: Path) -> dict[str, bytes] | None:
    """Every file under `folder` with its bytes (None when the folder does not exist)."""
    if not folder.exists():
        return None
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def assert_one_line_error(code: int, lines: list[str], *expected: str) -> None:
    assert code != 0
    errors = [line for line in lines if line.startswith("error:")]
    assert len(errors) == 1 and len(lines) <= 2, lines  # the error, at most one hint/note line
    for text in expected:
        assert text in errors[0], errors[0]


def fake_checkpoint(folder: Path) -> Path:
    """The files of a checkpoint, as small as they come (valid for the file checks, never loaded)."""
    from safetensors.numpy import save_file
    import numpy as np

    folder.mkdir(parents=True)
    (folder / "tokenizer.json").write_text("{}")
    (folder / "config.json").write_text(json.dumps({"model_type": "qwen3"}))
    save_file({"w": np.zeros((4, 4), dtype=np.float32)}, str(folder / "model.safetensors"))
    return folder


# ------------------------------------------------------------------------ model.path


def test_a_missing_model_path_is_one_line_without_a_hub_lookup(tmp_path, capsys, monkeypatch):
    def no_network(*args, **kwargs):
        raise AssertionError("a missing model.path must not be looked up on the hub")

    monkeypatch.setattr(socket.socket, "connect", no_network)
    out = tmp_path / "run"
    code, lines, _ = run_cli(["eval", "policy=hf", "model.path=models/not-made-yet", f"out_dir={out}"], capsys)
    assert_one_line_error(code, lines, "model.path='models/not-made-yet' is not a directory", "init-model")
    assert snapshot(out) is None


@pytest.mark.parametrize("damage, message", [
    (lambda d: [p.unlink() for p in d.iterdir()], "is empty"),
    (lambda d: (d / "config.json").unlink(), "config.json is missing"),
    (lambda d: (d / "config.json").write_text("{not json"), "config.json is not valid JSON"),
    (lambda d: (d / "config.json").write_text("[1, 2]"), "has no model_type"),
    (lambda d: (d / "model.safetensors").write_bytes((d / "model.safetensors").read_bytes()[:-10]), "is truncated"),
    (lambda d: (d / "model.safetensors").write_bytes(b"\x05"), "is truncated"),
    (lambda d: (d / "model.safetensors").unlink(), "holds no weights"),
    (lambda d: (d / "tokenizer.json").unlink(), "no tokenizer.json"),
    (lambda d: (d / "tokenizer.json").write_text("garbage\n" * 49), "tokenizer.json is not valid JSON"),
    (lambda d: (d / "config.json").write_text(json.dumps({"model_type": "qwen99"})),
     "model_type 'qwen99' is not a model this transformers knows"),
])
def test_a_damaged_checkpoint_names_the_file_and_the_problem(tmp_path, capsys, damage, message):
    model = fake_checkpoint(tmp_path / "model")
    assert check_checkpoint(str(model)) == str(model)
    damage(model)
    with pytest.raises(CheckpointError, match=message):
        check_checkpoint(str(model))
    out = tmp_path / "run"
    code, lines, _ = run_cli(["sft", f"model.path={model}", f"sft.data={tmp_path}", f"out_dir={out}"], capsys)
    assert_one_line_error(code, lines, message)
    assert snapshot(out) is None


# -------------------------------------------------------------- overrides and config


@pytest.mark.parametrize("override, message", [
    ("nosuchkey=1", "Could not override 'nosuchkey'"),
    ("+foo.bar=1", "foo: no such config key"),
    ("+grpo.nope=2", "grpo.nope: no such config key"),
    ("env=nosuch", "Could not find 'env/nosuch'"),
    ("grpo.updates=abc", "grpo.updates=abc: Value 'abc' of type 'str' could not be converted to Integer; the key takes an integer"),
    ("grpo.group_size=1", "grpo.group_size=1 must be >= 2"),
    ("policy.request_timeout_s=0", "policy.request_timeout_s=0"),
    ("limit=-1", "limit=-1 must be > 0"),
    ("env.num_workers=-2", "env.num_workers=-2 must be > 0"),
    ("env.pool=threads", "env.pool='threads' is not valid; allowed values: process, ray"),
    ("env.ray_cpus_per_worker=-1", "env.ray_cpus_per_worker=-1.0 must be >= 0"),
])
def test_invalid_overrides_are_one_line_and_write_nothing(tmp_path, capsys, override, message):
    out = tmp_path / "run"
    code, lines, _ = run_cli(["grpo", override, f"out_dir={out}"], capsys)
    assert code == 2
    assert_one_line_error(code, lines, "invalid configuration", message)
    assert snapshot(out) is None


def test_invalid_overrides_fail_before_torch_or_an_environment_loads(tmp_path):
    code = (
        "import sys\nfrom evoharness_rl.cli import main\n"
        "for args in (['grpo', 'grpo.group_size=1'], ['eval', 'nosuchkey=1'], ['sft', '+foo=1']):\n"
        "    try:\n        main(args + ['out_dir=" + str(tmp_path / "run") + "'])\n"
        "    except SystemExit as stop:\n        assert stop.code == 2, stop.code\n"
        "heavy = [m for m in ('torch', 'transformers', 'vllm', 'evoharness_rl.envs.alfworld.adapter') if m in sys.modules]\n"
        "print('HEAVY', heavy)\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert "HEAVY []" in result.stdout, result.stdout + result.stderr


# ---------------------------------------------------------------- CLI flag positions


@pytest.mark.parametrize("args", [
    ["limit=3", "--cfg", "job", "seed=5"],
    ["--cfg", "job", "limit=3", "seed=5"],
    ["limit=3", "seed=5", "--cfg", "job"],
])
def test_cfg_job_works_wherever_the_flag_is(capsys, args):
    code, lines, out = run_cli(["eval", *args], capsys)
    assert code == 0, lines
    assert "command: eval" in out and "limit: 3" in out and "seed: 5" in out


def test_split_flags_keeps_values_with_their_flags():
    assert split_flags(["a=1", "--multirun", "b=1,2", "--cfg", "job", "-p", "env", "--info", "c=3"]) == (
        ["--multirun", "--cfg", "job", "-p", "env", "--info"], ["a=1", "b=1,2", "c=3"])
    assert split_flags(["--info", "config", "x=1"]) == (["--info", "config"], ["x=1"])


@pytest.mark.parametrize("first", [True, False])
def test_multirun_works_before_or_after_the_overrides(tmp_path, capsys, first):
    overrides = ["size=tiny", "seed=0,1", "out=${hydra:runtime.output_dir}/model", f"hydra.sweep.dir={tmp_path}/sweep"]
    args = ["init-model", *(["--multirun", *overrides] if first else [*overrides, "--multirun"])]
    code, lines, out = run_cli(args, capsys)
    assert code == 0, lines
    assert out.count("wrote tiny model") == 2
    assert sorted(p.name for p in (tmp_path / "sweep").iterdir() if p.is_dir()) == ["0", "1"]


# --------------------------------------------------------------------------- out_dir


def test_a_second_job_into_a_busy_out_dir_is_refused(tmp_path, capsys):
    out = tmp_path / "run"
    out.mkdir()
    (out / "config.yaml").write_text("the first job's config\n")
    (out / LOCK_FILE).write_text(f"{os.getpid()}\n")  # a live holder: this test process
    before = snapshot(out)
    code, lines, _ = run_cli(["init-model", "size=tiny", f"out={tmp_path}/m", f"out_dir={out}"], capsys)
    assert_one_line_error(code, lines, f"out_dir {out} is in use by another job (pid {os.getpid()}")
    assert snapshot(out) == before and not (tmp_path / "m").exists()


def test_a_stale_lock_is_taken_over_and_said(tmp_path):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    (tmp_path / LOCK_FILE).write_text(f"{dead.pid}\n")
    notes = []
    with out_dir_lock(tmp_path, notes.append):
        assert (tmp_path / LOCK_FILE).read_text().split() == [str(os.getpid())]
        with pytest.raises(OutDirBusy, match="in use by another job"):
            with out_dir_lock(tmp_path, notes.append):
                pass
    assert not (tmp_path / LOCK_FILE).exists()
    assert notes == [f"took over the stale lock {tmp_path / LOCK_FILE} (its process {dead.pid} is gone)"]


def test_a_grpo_rerun_without_resume_is_refused_before_anything_loads(tmp_path, capsys):
    model = fake_checkpoint(tmp_path / "model")
    out = tmp_path / "run"
    (out / "checkpoints" / "update_000003").mkdir(parents=True)
    (out / "checkpoints" / "update_000003" / "trainer_state.json").write_text("{}")
    (out / "config.yaml").write_text("the first run's config\n")
    (out / "run.log").write_text("the first run's log\n")
    before = snapshot(out)
    code, lines, _ = run_cli(["grpo", f"model.path={model}", f"out_dir={out}"], capsys)
    assert_one_line_error(code, lines, f"{out} already holds a GRPO run (latest checkpoint: update_000003)",
                          "resume=true", "another out_dir")
    assert snapshot(out) == before


def test_an_eval_of_another_configuration_is_refused_and_leaves_the_run_as_it_was(tmp_path, capsys):
    out = tmp_path / "run"
    common = ["eval", "env.name=choice", "policy=scripted", "split=test", "limit=2", "env.num_workers=1",
              "logger.progress=false", f"out_dir={out}"]
    code, lines, _ = run_cli([*common, "seed=0"], capsys)
    assert code == 0, lines
    before = snapshot(out)
    code, lines, _ = run_cli([*common, "seed=1"], capsys)
    assert_one_line_error(code, lines, "holds episodes recorded with another configuration (differs in: seed)")
    assert snapshot(out) == before


# ----------------------------------------------------------------- a dead endpoint


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("policy", ["openai", "vllm_server"])
def test_a_dead_server_is_one_line_before_the_eval_starts(tmp_path, capsys, policy):
    from evoharness_rl.engines.base import SamplingSettings
    from evoharness_rl.engines.openai import OpenAIBackend

    port = _closed_port()
    url = f"http://user:secret@127.0.0.1:{port}/v1?key=secret"
    backend = OpenAIBackend(url, "m", max_retries=0, timeout=5.0)  # a server that dies mid-run: one line per request
    completion = backend._one([{"role": "user", "content": "hi"}], SamplingSettings())
    assert completion.finish_reason == "error" and "\n" not in completion.error
    assert f"from http://127.0.0.1:{port}/v1" in completion.error and "secret" not in completion.error

    out = tmp_path / "run"
    out.mkdir()
    (out / "notes.txt").write_text("mine\n")
    before = snapshot(out)
    model = fake_checkpoint(tmp_path / "model")  # vllm_server reads the tokenizer only
    code, lines, stdout = run_cli(["eval", "env.name=choice", f"policy={policy}", f"policy.base_url='{url}'",
                                   f"model.path={model}", "policy.model_name=m", "policy.max_retries=0", "split=test",
                                   "limit=2", "env.num_workers=1", "logger.progress=false", f"out_dir={out}"], capsys)
    assert_one_line_error(code, lines, f"policy.base_url=http://127.0.0.1:{port}/v1: no server answers there",
                          "start the server")
    assert stdout == "" and not any("secret" in line for line in lines)
    assert snapshot(out) == before


def test_env_pool_ray_without_ray_installed_is_one_line(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` now fails as on a machine without the extra
    code, lines, _ = run_cli(["eval", "env.name=choice", "policy=scripted", "env.pool=ray", "limit=1",
                              "logger.progress=false", f"out_dir={tmp_path / 'run'}"], capsys)
    assert_one_line_error(code, lines, "env.pool=ray needs the ray package", "evoharness-rl[ray]")


def test_an_unreachable_ray_cluster_is_one_line(tmp_path):
    """A fresh interpreter: a Ray instance started by another test of this session would be joined instead."""
    port = _closed_port()
    args = ["eval", "env.name=choice", "policy=scripted", "env.pool=ray", f"env.ray_address=127.0.0.1:{port}",
            "limit=1", "logger.progress=false", f"out_dir={tmp_path / 'run'}"]
    script = ("import sys\nfrom evoharness_rl.envs import register_env\n"
              "register_env('choice', 'tests.fakes.choice:make_choice_env')\n"
              "from evoharness_rl.cli import main\nmain(sys.argv[1:])\n")
    done = subprocess.run([sys.executable, "-c", script, *args], capture_output=True, text=True, cwd=ROOT, timeout=120)
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert_one_line_error(done.returncode, lines, f"env.ray_address='127.0.0.1:{port}': no Ray cluster answers",
                          "ray start --head")


def test_a_share_of_errored_episodes_above_max_error_rate_is_a_warning(capsys, tmp_path):
    from evoharness_rl.cli import _check_errors
    from evoharness_rl.config import Config

    cfg = Config(out_dir=str(tmp_path))
    summary = {"episodes": 18, "errors": 2, "error_examples": ["TimeoutError from http://h/v1: slow\nmore"]}
    _check_errors(cfg, summary)
    (warning,) = capsys.readouterr().err.splitlines()
    assert warning.startswith("warning: 2 of 20 episodes errored, more than max_error_rate=0.05 (first: TimeoutError")
    cfg.max_error_rate = 0.2
    _check_errors(cfg, summary)
    assert capsys.readouterr().err == ""


# ----------------------------------------------------------------- Experience bank


def _bank_file(folder: Path) -> Path:
    from evoharness_rl.experience import ExperienceBank
    from evoharness_rl.experience.operations import Operation

    bank = ExperienceBank()
    bank.apply([Operation("add", category="search", subject="kettle", principle="kettle: stoveburner"),
                Operation("add", category="search", subject="mug", principle="mug: cabinet")], "seed")
    return bank.save(folder / "bank.json")


def _edited(edit, keep_hash=False):
    def damage(path: Path) -> None:
        data = json.loads(path.read_text())
        edit(data)
        if not keep_hash:
            data.pop("content_hash")  # a deliberate hand edit (the loader then checks the structure alone)
        path.write_text(json.dumps(data))
    return damage


@pytest.mark.parametrize("damage, message", [
    (_edited(lambda d: d["entries"][0].update(status="deleted")), "entries[0].status must be 'active' or 'archived'"),
    (_edited(lambda d: d["entries"][1].update(id="srch-001")), "id 'srch-001' appears twice"),
    (_edited(lambda d: d["entries"][0].update(category="kitchen")), "category 'kitchen' is not valid"),
    (_edited(lambda d: d["entries"][0].update(principle="edited"), keep_hash=True), "content hash mismatch"),
    (_edited(lambda d: d.update(schema_version=99)), "newer than this EvoHarness-RL supports"),
    (lambda p: p.write_text(p.read_text()[:200]), "is not valid JSON"),
])
def test_a_damaged_bank_is_one_line_and_left_as_it_was(tmp_path, capsys, damage, message):
    from evoharness_rl.rollout.trajectory import write_jsonl
    from tests.experience import synthetic

    bank = _bank_file(tmp_path / "seed")
    damage(bank)
    raw = bank.read_bytes()
    write_jsonl(tmp_path / "t.jsonl", synthetic.batch(4))
    out = tmp_path / "run"
    code, lines, _ = run_cli(["consolidate", "env=alfworld", f"experience.trajectories={tmp_path / 't.jsonl'}",
                              f"experience.bank={bank}", "logger.progress=false", f"out_dir={out}"], capsys)
    assert_one_line_error(code, lines, str(bank), message)
    assert bank.read_bytes() == raw and not (out / "bank.json").exists() and not (out / "history.jsonl").exists()
    code, lines, _ = run_cli(["bank", "show", str(bank)], capsys)
    assert_one_line_error(code, lines, message)
