"""The faults users meet (issue 53): a full disk, a crash while SFT saves, Ctrl-C and SIGTERM, a server that hangs
or answers an error, and the smaller ones. Each ends in one line that names the problem and the fix, with no
traceback; finished files stay byte-identical, no temporary file is left, and a rerun continues.

A full disk is a real one where this test may mount a small tmpfs (root on Linux), else the case is skipped with
the reason; the unit cases patch a writer instead. Signals go to a real CLI subprocess; servers are real loopback
HTTP servers (tests/fakes/hung_server.py) whose every wait is bounded."""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from evoharness_rl import faults
from tests.fakes.hung_server import HungServer
from tests.test_bad_inputs import fake_checkpoint, run_cli, snapshot

ROOT = Path(__file__).resolve().parent.parent
CHOICE_EVAL = ["eval", "env.name=choice", "policy=scripted", "split=test", "limit=4", "env.num_workers=1",
               "logger.progress=false"]


def error_lines(lines: list[str]) -> list[str]:
    return [line for line in lines if line.startswith("error:")]


def assert_one_error(code: int, lines: list[str], *expected: str) -> str:
    """Exit non-zero, exactly one `error:` line holding `expected`, no traceback."""
    assert code != 0, lines
    errors = error_lines(lines)
    assert len(errors) == 1, lines
    assert not any("Traceback" in line for line in lines), lines
    for text in expected:
        assert text in errors[0], errors[0]
    return errors[0]


def temp_files(folder: Path) -> list[Path]:
    """What a writer stages in and must not leave behind: `.NAME.tmp.PID`, `.NAME.tmp`, `.merged.staging`."""
    return [p for p in folder.rglob(".*") if re.search(r"\.tmp(\.\d+)?$|\.staging$", p.name)]


# ------------------------------------------------------------------ a full disk: the writers


def test_an_atomic_write_that_runs_out_of_space_names_the_path_and_leaves_the_old_file(tmp_path, monkeypatch):
    from evoharness_rl.fileio import atomic_write_text

    target = tmp_path / "summary.json"
    target.write_text("the finished summary\n")

    def full(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(faults.DiskFull) as caught:
        atomic_write_text(target, "x" * 2500)
    assert f"writing {target} needs about 2.5 kB" in str(caught.value)
    assert target.read_text() == "the finished summary\n"
    assert temp_files(tmp_path) == []


def test_torch_write_errors_count_as_a_full_disk_only_when_the_disk_is_full(tmp_path, monkeypatch):
    torch_error = RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 1823552 vs 1823440")
    monkeypatch.setattr(faults, "free_bytes", lambda path: 0)
    assert faults.disk_full(torch_error, tmp_path)
    monkeypatch.setattr(faults, "free_bytes", lambda path: 10 << 30)
    assert not faults.disk_full(torch_error, tmp_path)  # a real bug stays a bug, with its traceback
    assert faults.disk_full(OSError(errno.ENOSPC, "No space left on device"))
    assert not faults.disk_full(ValueError("bad value"), tmp_path)


def test_a_run_log_line_is_appended_whole_or_not_at_all(tmp_path, monkeypatch):
    from evoharness_rl import runlog

    path = tmp_path / "metrics.jsonl"
    path.write_text('{"step": 0}\n')
    real_open = open

    class HalfWriter:
        def __init__(self, fh):
            self.fh = fh

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.fh.close()

        def write(self, text):
            self.fh.write(text[:5])
            self.fh.flush()
            raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr("builtins.open", lambda *a, **k: HalfWriter(real_open(*a, **k)))
    with pytest.raises(OSError):
        runlog.append_line(path, '{"step": 1, "loss": 0.5}')
    monkeypatch.undo()
    assert path.read_text() == '{"step": 0}\n'


@pytest.mark.parametrize("command", ["prepare", "collect", "eval", "consolidate", "report", "view", "init-model"])
def test_every_writing_stage_turns_a_full_disk_into_one_line(command, tmp_path, capsys, monkeypatch):
    """Whatever the stage writes with, ENOSPC from inside it is one line naming the file, with no traceback, and
    the stage's temporary files are gone."""
    from evoharness_rl import cli

    out = tmp_path / "out"
    victim = out / "trajectories" / "choice_0-ep0.json"

    def fill_the_disk(cfg):
        folder = Path(cfg.out if command == "init-model" else cfg.out_dir)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f".half.json.tmp.{os.getpid()}").write_text("half")  # a temp file of this process, left behind
        raise OSError(errno.ENOSPC, "No space left on device", str(victim))

    monkeypatch.setitem(cli._COMMANDS, command, fill_the_disk)
    args = {"init-model": ["init-model", "size=tiny", f"out={out}", f"out_dir={tmp_path / 'log'}"],
            "consolidate": ["consolidate", "env.name=choice", f"out_dir={out}"],
            "report": ["report", f"runs=[{tmp_path}]", f"out_dir={out}"],
            "view": ["view", f"runs=[{tmp_path}]", f"out_dir={out}"]}.get(
        command, [command, "env.name=choice", "policy=scripted", f"out_dir={out}"])
    code, lines, _ = run_cli(args, capsys)
    assert_one_error(code, lines, "disk full", str(victim), "free space", "rerun")
    assert len(lines) <= 2
    if command != "view":  # view's out_dir is the site itself, replaced whole (its own staging is view's to clean)
        assert temp_files(out) == []


# ------------------------------------------------------------------ a full disk: the real thing (tmpfs)


@pytest.fixture
def small_disk(tmp_path):
    """mount(size): a tmpfs of `size` under tmp_path (skipped where this process may not mount one)."""
    mounts = []

    def mount(size: str) -> Path:
        where = tmp_path / f"disk{len(mounts)}"
        where.mkdir()
        if not sys.platform.startswith("linux") or os.geteuid() != 0:
            pytest.skip("a full disk needs a small tmpfs, and mounting one needs root on Linux")
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)],
                              capture_output=True, text=True)
        if done.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
        mounts.append(where)
        return where

    yield mount
    for where in mounts:
        subprocess.run(["umount", "-l", str(where)], capture_output=True)


def fill(disk: Path, leave_bytes: int) -> Path:
    """A file that leaves about `leave_bytes` free on `disk`."""
    filler = disk / "filler"
    free = faults.free_bytes(disk)
    with open(filler, "wb") as fh:
        fh.write(b"\0" * max(free - leave_bytes, 0))
    return filler


def test_eval_on_a_full_disk_keeps_its_episodes_and_continues_once_space_is_free(small_disk, capsys):
    disk = small_disk("2m")
    out = disk / "eval"
    code, _, _ = run_cli([*CHOICE_EVAL, f"out_dir={out}"], capsys)  # a finished eval
    assert code == 0
    before = snapshot(out)
    filler = fill(disk, 0)
    code, lines, _ = run_cli([*CHOICE_EVAL, "limit=30", f"out_dir={out}"], capsys)  # more episodes: no room
    assert_one_error(code, lines, "disk full: writing", str(out), "rerun the same command")
    assert all(snapshot(out).get(name) == data for name, data in before.items() if name != "run.log")
    assert temp_files(out) == [] and not (out / ".lock").exists()

    filler.unlink()
    code, lines, _ = run_cli([*CHOICE_EVAL, "limit=30", f"out_dir={out}"], capsys)
    assert code == 0, lines
    assert any("4 already recorded" in line for line in lines), lines  # it continued
    assert json.loads((out / "summary.json").read_text())["episodes"] == 30


def test_grpo_on_a_full_disk_leaves_no_half_checkpoint_and_resumes_once_space_is_free(small_disk, tiny_model, capsys):
    disk = small_disk("3m")  # the run's logs fit; its first checkpoint (weights + AdamW moments) does not
    out = disk / "grpo"
    args = ["grpo", "env=choice", f"model.path={tiny_model}", "policy=hf", "grpo.updates=2", "grpo.prompts_per_update=2",
            "grpo.group_size=2", "grpo.mini_batch_trajectories=4", "grpo.save_every=1", "grpo.eval_every=0",
            "env.num_workers=1", "logger.progress=false", f"out_dir={out}"]
    code, lines, _ = run_cli(args, capsys)
    line = assert_one_error(code, lines, f"disk full: writing {out / 'checkpoints' / 'update_000001'} needs about",
                            "resume=true")
    assert "MB" in line and not any("Traceback" in x for x in lines)
    assert temp_files(out) == [] and not (out / ".lock").exists()

    subprocess.run(["mount", "-o", "remount,size=64m", str(disk)], check=True)
    code, lines, _ = run_cli([*args, "resume=true"], capsys)
    assert code == 0, lines
    assert (out / "final" / "config.json").is_file()
    steps = [json.loads(line)["step"] for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert steps == sorted(set(steps))  # the failed attempt's rows are not counted twice


# ------------------------------------------------------------------ SFT: resume from the newest complete checkpoint


def sft_checkpoint(folder: Path, step: int, *, state=True, weights=True, optimizer=True) -> Path:
    """A checkpoint-N as TRL writes it (tiny files), with any of its parts missing."""
    import numpy as np
    import torch
    from safetensors.numpy import save_file

    path = folder / f"checkpoint-{step}"
    path.mkdir(parents=True)
    if weights:
        save_file({"w": np.zeros((4, 4), dtype=np.float32)}, str(path / "adapter_model.safetensors"))
    if optimizer:
        torch.save({"state": {}}, path / "optimizer.pt")
    if state:
        (path / "trainer_state.json").write_text(json.dumps({"global_step": step}))
    return path


@pytest.mark.parametrize("damage, reason", [("empty", "no trainer_state.json"),
                                            ("no_state", "no trainer_state.json"),
                                            ("truncated", "adapter_model.safetensors is truncated"),
                                            ("no_optimizer", "no optimizer state")])
def test_sft_resume_skips_an_incomplete_newest_checkpoint_and_names_it(tmp_path, damage, reason):
    from evoharness_rl.sft.checkpoints import newest_complete

    folder = tmp_path / "checkpoints"
    sft_checkpoint(folder, 1)
    complete = sft_checkpoint(folder, 2)
    if damage == "empty":
        (folder / "checkpoint-3").mkdir()
    elif damage == "no_state":
        sft_checkpoint(folder, 3, state=False)
    elif damage == "no_optimizer":
        sft_checkpoint(folder, 3, optimizer=False)
    else:
        weights = sft_checkpoint(folder, 3) / "adapter_model.safetensors"
        os.truncate(weights, weights.stat().st_size - 8)
    notes = []
    assert newest_complete(folder, notes.append) == complete
    assert len(notes) == 1 and "checkpoint-3" in notes[0] and reason in notes[0], notes
    assert "resuming from checkpoint-2" in notes[0]
    assert not (folder / "checkpoint-3").exists()  # nothing can continue from it; TRL would save into it


def test_sft_resume_without_a_complete_checkpoint_starts_afresh(tmp_path):
    from evoharness_rl.sft.checkpoints import newest_complete

    folder = tmp_path / "checkpoints"
    sft_checkpoint(folder, 1, weights=False)
    notes = []
    assert newest_complete(folder, notes.append) is None
    assert "starting afresh" in notes[0]


def test_sft_that_fails_while_saving_removes_the_checkpoint_it_began(tmp_path, capsys, monkeypatch):
    from evoharness_rl import cli

    model = fake_checkpoint(tmp_path / "model")
    out = tmp_path / "sft"
    kept = sft_checkpoint(out / "checkpoints", 2)

    def fail_while_saving(cfg):
        sft_checkpoint(out / "checkpoints", 3, state=False, optimizer=False)
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setitem(cli._COMMANDS, "sft", fail_while_saving)
    before = snapshot(kept)
    code, lines, _ = run_cli(["sft", f"model.path={model}", f"sft.data={tmp_path}", "resume=true", f"out_dir={out}"],
                             capsys)
    assert_one_error(code, lines, f"disk full: writing {out / 'checkpoints' / 'checkpoint-3'}", "resume=true")
    assert not (out / "checkpoints" / "checkpoint-3").exists() and snapshot(kept) == before


def test_sft_resume_of_a_finished_run_changes_nothing(tmp_path, capsys):
    from tests.test_out_dir_safety import saved_config

    model = fake_checkpoint(tmp_path / "model")
    out = tmp_path / "sft"
    settings = ["command=sft", f"model.path={model}", f"sft.data={tmp_path}"]
    saved_config(out, *settings)
    fake_checkpoint(out / "merged")
    sft_checkpoint(out / "checkpoints", 4)
    (out / "metrics.jsonl").write_text('{"step": 4, "train_runtime": 1.0}\n')
    before = snapshot(out)
    code, lines, stdout = run_cli(["sft", f"model.path={model}", f"sft.data={tmp_path}", "resume=true",
                                   f"out_dir={out}"], capsys)
    assert code == 0 and len(lines) <= 2, lines
    assert f"SFT checkpoint: {out / 'merged'}" in stdout
    assert snapshot(out) == before  # no rewritten config.yaml, no second end-of-training row


# ------------------------------------------------------------------ Ctrl-C and SIGTERM


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    from evoharness_rl.models import init_model

    return init_model("tiny", tmp_path_factory.mktemp("faults-model") / "tiny")


def start_cli(args: list[str]) -> subprocess.Popen:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    return subprocess.Popen([sys.executable, "-c", "from evoharness_rl.cli import main; main()", *args], cwd=ROOT,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)


def wait_for(condition, proc: subprocess.Popen, timeout_s: float = 240.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the run did not get there in time"
        time.sleep(0.05)


@pytest.mark.parametrize("sig, code, group", [(signal.SIGINT, 130, False), (signal.SIGTERM, 143, True)])
def test_an_interrupted_eval_says_where_it_stopped_in_one_line_and_continues(tiny_model, tmp_path, sig, code, group):
    """The signal goes to a real CLI process (SIGTERM to its whole process group, as SLURM and Kubernetes send
    it): exit 130 / 143 within 2 s, one line naming where the run stopped and how to resume, no traceback, no
    leaked-semaphore warning, no temporary file; the rerun keeps the recorded episodes."""
    out = tmp_path / "eval"
    args = ["eval", "env=choice", "policy=hf", f"model.path={tiny_model}", "split=test", "limit=12",
            "env.num_workers=1", "policy.batch_size=1", "env.max_live_episodes=1", "logger.progress=false",
            f"out_dir={out}"]
    proc = start_cli(args)
    wait_for(lambda: any((out / "trajectories").glob("*.json")), proc)
    sent = time.monotonic()
    os.killpg(proc.pid, sig) if group else proc.send_signal(sig)
    _, stderr = proc.communicate(timeout=30)
    took = time.monotonic() - sent
    assert proc.returncode == code and took < 2.0, (proc.returncode, took, stderr)
    lines = [line for line in stderr.splitlines() if line.strip()]
    stops = [line for line in lines if line.startswith("interrupted")]
    assert len(stops) == 1, lines
    assert f"interrupted ({'Ctrl-C' if sig == signal.SIGINT else 'SIGTERM'}): eval in {out}" in stops[0]
    assert "episode" in stops[0] and "rerun the same command" in stops[0]
    assert not any("Traceback" in line or "leaked" in line for line in lines), lines
    assert temp_files(out) == [] and not (out / ".lock").exists()
    recorded = len(list((out / "trajectories").glob("*.json")))

    done = subprocess.run([sys.executable, "-m", "evoharness_rl", *args[:-1], "limit=2", f"out_dir={out}"],
                          cwd=ROOT, env={**os.environ, "OMP_NUM_THREADS": "1"}, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    assert f"{min(recorded, 2)} already recorded" in done.stderr


SLOW_UNWIND = """
import sys, time
from evoharness_rl import faults
faults.catch_signals(lambda signum: print(f"stopped by {signum}", file=sys.stderr))
try:
    print("ready", flush=True)
    time.sleep(60)
finally:
    time.sleep(30)  # a cleanup that would take far too long
"""


def test_a_run_that_does_not_unwind_in_time_is_ended_by_the_watchdog_with_its_line():
    proc = subprocess.Popen([sys.executable, "-c", SLOW_UNWIND], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready"
    sent = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=30)
    assert proc.returncode == 143 and time.monotonic() - sent < faults.UNWIND_S + 1.0, stderr
    assert stderr.strip() == f"stopped by {int(signal.SIGTERM)}"


# ------------------------------------------------------------------ servers that hang or fail


@pytest.fixture
def key(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-0000")


def test_a_request_a_hung_server_never_answers_ends_in_bounded_time_naming_url_and_timeout(key):
    from evoharness_rl.engines.base import GenerationRequest, SamplingSettings
    from evoharness_rl.engines.openai import OpenAIBackend, ServerUnresponsive

    with HungServer(models="ok", chat="hang") as server:
        backend = OpenAIBackend(server.url, "m", max_retries=4, timeout=1.0)
        started = time.monotonic()
        with pytest.raises(ServerUnresponsive) as caught:
            backend.generate([GenerationRequest(messages=[{"role": "user", "content": "q"}], key="e0")],
                             SamplingSettings())
        assert time.monotonic() - started < 8.0  # one 1 s timeout; retried, it would take 5 s + 7.5 s of backoff
        assert server.hits == ["POST /v1/chat/completions"]
    message = str(caught.value)
    assert server.url in message and "policy.request_timeout_s=1 s" in message and "\n" not in message


def test_the_vllm_server_backend_bounds_a_hung_server_too(key, tiny_model):
    from evoharness_rl.engines.base import GenerationRequest, SamplingSettings
    from evoharness_rl.engines.openai import ServerUnresponsive
    from evoharness_rl.engines.vllm import VLLMServerBackend
    from evoharness_rl.models import load_tokenizer

    with HungServer(models="ok", chat="hang") as server:
        backend = VLLMServerBackend(server.url, load_tokenizer(str(tiny_model)), max_retries=4, timeout=1.0)
        with pytest.raises(ServerUnresponsive, match=re.escape(f"policy.base_url={server.url} gave no answer")):
            backend.generate([GenerationRequest(messages=[], key="e0", prompt_ids=[1, 2, 3])], SamplingSettings())
        assert server.hits == ["GET /v1/models", "POST /v1/completions"]


def test_a_long_wait_prints_one_warning_line_before_it_gives_up(key, monkeypatch, capsys):
    from evoharness_rl.engines import openai as backend_module

    monkeypatch.setattr(backend_module, "WAIT_WARNING_S", 0.3)
    with HungServer(models="ok", chat="hang") as server:
        backend = backend_module.OpenAIBackend(server.url, "m", max_retries=0, timeout=1.0)
        with pytest.raises(backend_module.ServerUnresponsive):
            backend.chat_text([{"role": "user", "content": "q"}])
    warnings = [line for line in capsys.readouterr().err.splitlines() if line.startswith("warning:")]
    assert warnings == [f"warning: no answer from {server.url} for 0.3 s; waiting up to policy.request_timeout_s=1 s"]


def test_eval_against_a_hung_server_is_refused_at_once_in_one_line(key, tmp_path, capsys, monkeypatch):
    from evoharness_rl.engines import openai as backend_module

    real = backend_module.check_reachable
    monkeypatch.setattr(backend_module, "check_reachable", lambda url, key="policy.base_url", timeout=10.0:
                        real(url, key, timeout=1.0))
    with HungServer(models="hang", chat="hang") as server:
        code, lines, _ = run_cli(["eval", "env.name=choice", "policy=openai", f"policy.base_url={server.url}",
                                  "policy.model_name=m", "split=test", "limit=2", "env.num_workers=1",
                                  "logger.progress=false", f"out_dir={tmp_path / 'eval'}"], capsys)
    assert_one_error(code, lines, server.url, "gave no answer to GET /models within 1 s")
    assert len(lines) == 1 and not (tmp_path / "eval").exists()


def test_eval_against_a_server_that_stops_answering_ends_with_one_line(key, tmp_path, capsys):
    with HungServer(models="ok", chat="hang") as server:
        code, lines, _ = run_cli(["eval", "env.name=choice", "policy=openai", f"policy.base_url={server.url}",
                                  "policy.model_name=m", "split=test", "limit=2", "env.num_workers=1",
                                  "policy.request_timeout_s=1", "logger.progress=false",
                                  f"out_dir={tmp_path / 'eval'}"], capsys)
    assert_one_error(code, lines, f"policy.base_url={server.url} gave no answer within policy.request_timeout_s=1 s")


def test_an_http_error_is_named_with_its_status(key, tmp_path, capsys):
    with HungServer(models="ok", chat=500) as server:
        code, lines, _ = run_cli(["eval", "env.name=choice", "policy=openai", f"policy.base_url={server.url}",
                                  "policy.model_name=m", "split=test", "limit=2", "env.num_workers=1",
                                  "policy.max_retries=0", "logger.progress=false",
                                  f"out_dir={tmp_path / 'eval'}"], capsys)
    assert_one_error(code, lines, "all 2 episodes errored", "(HTTP 500)", server.url)


@pytest.mark.parametrize("chat, expected", [("hang", "gave no answer within experience.request_timeout_s=1 s"),
                                            (503, "(HTTP 503)")])
def test_a_consolidator_server_that_hangs_or_fails_ends_consolidate_in_one_line(key, tmp_path, capsys, chat, expected):
    from evoharness_rl.rollout.trajectory import write_jsonl
    from tests.experience import synthetic

    episodes = tmp_path / "episodes.jsonl"
    write_jsonl(episodes, synthetic.batch(4))
    with HungServer(models="ok", chat=chat) as server:
        code, lines, _ = run_cli(["consolidate", "env.name=alfworld", f"experience.trajectories={episodes}",
                                  "experience.consolidator=openai", f"experience.base_url={server.url}",
                                  "experience.model_name=m", "experience.request_timeout_s=1",
                                  "experience.max_retries=0", "logger.progress=false",
                                  f"out_dir={tmp_path / 'bank'}"], capsys)
    assert_one_error(code, lines, expected)


# ------------------------------------------------------------------ the smaller ones


def test_bank_log_without_history_jsonl_prints_the_banks_own_summary(tmp_path, capsys):
    from evoharness_rl.experience.bank import ExperienceBank
    from evoharness_rl.experience.operations import Operation

    bank = ExperienceBank()
    bank.update_index = 1
    bank.apply([Operation("add", category="general", principle="look first", task_types=("a", "b"))], "test")
    bank.ops_history.append({"update": 1, "source": "heuristic", "episodes": 8, "ops": {"add": 1},
                             "chosen": {"add": 1}, "redirected": {}, "pruned": 0, "failures": 2, "composition": {}})
    bank.save(tmp_path / "bank.json")
    code, lines, stdout = run_cli(["bank", "log", str(tmp_path / "bank.json")], capsys)
    assert code == 0 and lines == [], lines
    assert "no history.jsonl beside it" in stdout and "cycle 1 [heuristic]: 8 episodes" in stdout
    assert "2 failures" in stdout


def test_env_diagnostics_is_a_config_group_like_the_others(tmp_path, capsys):
    from evoharness_rl.cli import check_overrides
    from tests.test_out_dir_safety import composed

    assert check_overrides(["env=diagnostics", "command=eval"]) == ""
    assert composed("env=diagnostics").env.name == "diagnostics"
    code, lines, stdout = run_cli(["eval", "env=diagnostics", "policy=scripted", "limit=1", "env.num_workers=1",
                                   "logger.progress=false", f"out_dir={tmp_path / 'eval'}"], capsys)
    assert code == 0, lines
    assert json.loads(stdout)["episodes"] >= 1


def test_a_huge_task_count_is_refused_at_once(tmp_path, capsys):
    started = time.monotonic()
    code, lines, _ = run_cli(["eval", "env.name=choice", "policy=scripted", "env.choice.tasks=1000000000",
                              f"out_dir={tmp_path / 'eval'}"], capsys)
    assert_one_error(code, lines, "env.choice.tasks=1000000000", "at most 100000")
    assert time.monotonic() - started < 10 and not (tmp_path / "eval").exists()


def test_the_action_parser_is_linear_and_reads_blocks_as_before():
    import random

    from evoharness_rl.harness import protocol

    lazy = re.compile(r"<\s*action\s*>(.*?)<\s*/\s*action\s*>", re.IGNORECASE | re.DOTALL)  # the old reading
    rng = random.Random(0)
    parts = ["<action>", "</action>", "< Action >", "</ ACTION>", "go north", " ", "\n", "<", ">", "/"]
    for _ in range(3000):
        text = "".join(rng.choice(parts) for _ in range(rng.randint(0, 10)))
        assert protocol._action_blocks(text) == lazy.findall(text), text
    started = time.perf_counter()
    parsed = protocol.parse_response("<action>" * 4000)  # 32k characters, never closed
    assert time.perf_counter() - started < 0.2
    assert parsed.kind is protocol.ActionKind.INVALID


def test_trl_vllm_range_warning_stays_out_of_logs():
    pytest.importorskip("vllm")
    done = subprocess.run([sys.executable, "-c", "import evoharness_rl, trl.import_utils as u; u.is_vllm_available()"],
                          cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "TRL currently supports vLLM" not in done.stderr


def test_a_bank_keeps_at_most_capacity_archived_entries_per_category_and_says_so():
    from evoharness_rl.experience.bank import ExperienceBank
    from evoharness_rl.experience.consolidation import _dropped_warning
    from evoharness_rl.experience.operations import Operation

    bank = ExperienceBank(capacity=2)
    dropped = 0
    for u in range(1, 8):  # two new entries a cycle: two older ones archived by capacity each time
        bank.update_index = u
        result = bank.apply([Operation("add", category="general", principle=f"rule {u} {k}", task_types=("a", "b"))
                             for k in range(2)], "test")
        dropped += result.dropped
    archived = [e for e in bank.entries.values() if not e.active]
    assert len(archived) == 2 and len(bank.active("general")) == 2
    assert dropped == 10  # 14 added, 2 active, 12 archived in all, 2 of them kept
    assert sorted(e.id for e in archived) == ["gen-011", "gen-012"]  # the most recently archived stay
    assert "archived entries removed" in _dropped_warning(result, bank)[0]
    assert bank.next_seq["gen"] == 14  # ids are never reused
