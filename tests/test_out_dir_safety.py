"""Nothing a user made is lost or exposed: a result in out_dir is replaced only when asked (`overwrite=true`
moves it aside), a resumed run keeps its settings, a refused job leaves out_dir byte-identical, and secrets
never reach a file Hydra or a run writes.

Each case runs the real CLI in this process (helpers from test_bad_inputs) and checks the one error line,
the exit code and the out_dir's bytes afterwards."""

from __future__ import annotations

import base64
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import save_file

from evoharness_rl.harness.protocol import ActionKind, parse_response
from tests.test_bad_inputs import assert_one_line_error, fake_checkpoint, run_cli, snapshot

CHOICE_EVAL = ["eval", "env.name=choice", "policy=scripted", "split=test", "limit=2", "env.num_workers=1",
               "logger.progress=false"]


def shaped_checkpoint(folder: Path, hidden: int = 4, vocab: int = 8) -> Path:
    """A fake checkpoint whose embedding is (vocab, hidden) and whose config.json says so."""
    fake_checkpoint(folder)
    (folder / "config.json").write_text(json.dumps({"model_type": "qwen3", "hidden_size": hidden,
                                                    "vocab_size": vocab}))
    save_file({"model.embed_tokens.weight": np.zeros((vocab, hidden), dtype=np.float32)},
              str(folder / "model.safetensors"))
    return folder


def composed(*overrides: str):
    """The Config the CLI composes from `overrides`."""
    from hydra import compose, initialize_config_dir
    from hydra.core.config_store import ConfigStore
    from omegaconf import OmegaConf

    from evoharness_rl.cli import config_dir
    from evoharness_rl.config import Config

    ConfigStore.instance().store(name="base_config", node=Config)
    with initialize_config_dir(config_dir=str(config_dir()), version_base="1.3"):
        return OmegaConf.to_object(compose("config", overrides=list(overrides)))


def saved_config(out: Path, *overrides: str) -> None:
    """out/config.yaml as a run with `overrides` wrote it."""
    from evoharness_rl.cli import write_run_config

    write_run_config(composed(*overrides, f"out_dir={out}"))


# ------------------------------------------------------------------ 1. init-model over a model


def test_init_model_never_replaces_a_model_unless_asked(tmp_path, capsys):
    model = fake_checkpoint(tmp_path / "model")
    before = snapshot(model)
    code, lines, _ = run_cli(["init-model", "size=tiny", f"out={model}", f"out_dir={tmp_path / 'log'}"], capsys)
    assert_one_line_error(code, lines, f"{model} already holds a model (config.json, model.safetensors",
                          "overwrite=true", "another out")
    assert snapshot(model) == before

    code, lines, out = run_cli(["init-model", "size=tiny", f"out={model}", "overwrite=true",
                                f"out_dir={tmp_path / 'log2'}"], capsys)
    assert code == 0, lines
    (aside,) = [p for p in tmp_path.iterdir() if p.name.startswith("model.replaced-")]
    assert snapshot(aside) == before  # the old model, moved aside whole
    assert any(f"was moved to {aside}" in line for line in lines)
    assert snapshot(model) != before and (model / "config.json").is_file()


# ------------------------------------------------------------------ 2. sft over a finished run


def test_sft_into_a_finished_run_without_resume_is_refused(tmp_path, capsys):
    model = fake_checkpoint(tmp_path / "model")
    out = tmp_path / "sft"
    for name in ("merged/model.safetensors", "checkpoints/checkpoint-10/trainer_state.json", "dataset/stats.json"):
        (out / name).parent.mkdir(parents=True, exist_ok=True)
        (out / name).write_text(f"the first run's {name}\n")
    (out / "config.yaml").write_text("the first run's config\n")
    before = snapshot(out)
    code, lines, _ = run_cli(["sft", f"model.path={model}", f"sft.data={tmp_path}", f"out_dir={out}"], capsys)
    assert_one_line_error(code, lines, f"{out} already holds a SFT run (merged, checkpoints, dataset)",
                          "resume=true", "overwrite=true")
    assert snapshot(out) == before


# ------------------------------------------------------------------ 3. grpo resume with other settings


def _finished_grpo(tmp_path: Path, model: Path) -> Path:
    out = tmp_path / "grpo"
    saved_config(out, "command=grpo", f"model.path={model}", "grpo.learning_rate=3e-4")
    (out / "checkpoints" / "update_000004").mkdir(parents=True)
    (out / "checkpoints" / "update_000004" / "trainer_state.json").write_text('{"update": 4}')
    (out / "metrics.jsonl").write_text('{"step": 4}\n')
    return out


def test_grpo_resume_with_other_settings_names_the_keys_and_changes_nothing(tmp_path, capsys):
    model = fake_checkpoint(tmp_path / "model")
    out = _finished_grpo(tmp_path, model)
    before = snapshot(out)
    code, lines, _ = run_cli(["grpo", f"model.path={model}", "resume=true", "grpo.learning_rate=0.5",
                              "grpo.clip_eps=0.3", f"out_dir={out}"], capsys)
    assert_one_line_error(code, lines, f"{out} was run with other settings",
                          "grpo.clip_eps: 0.2 -> 0.3", "grpo.learning_rate: 0.0003 -> 0.5",
                          "resume_changes=[grpo.clip_eps,grpo.learning_rate]")
    assert snapshot(out) == before


def test_resume_changes_names_keys_changed_on_purpose(tmp_path, capsys):
    from evoharness_rl.cli import check_same_settings

    out = tmp_path / "grpo"
    saved_config(out, "command=grpo", "grpo.learning_rate=3e-4")
    cfg = composed("command=grpo", f"out_dir={out}", "resume=true", "resume_changes=[grpo.learning_rate]",
                   "grpo.learning_rate=0.5")
    check_same_settings(cfg, out)  # named: accepted
    cfg.resume_changes = []
    with pytest.raises(Exception, match="grpo.learning_rate: 0.0003 -> 0.5"):
        check_same_settings(cfg, out)
    cfg.grpo.learning_rate, cfg.env.num_workers, cfg.grpo.updates = 3e-4, 7, 999  # how it runs, and for how long
    check_same_settings(cfg, out)


def test_grpo_overwrite_moves_the_run_aside_first(tmp_path, capsys, monkeypatch):
    import evoharness_rl.cli as cli

    model = fake_checkpoint(tmp_path / "model")
    out = _finished_grpo(tmp_path, model)
    before = snapshot(out)
    ran = []
    monkeypatch.setitem(cli._COMMANDS, "grpo", lambda cfg: ran.append(sorted(p.name for p in Path(cfg.out_dir).iterdir())))
    code, lines, _ = run_cli(["grpo", f"model.path={model}", "overwrite=true", f"out_dir={out}"], capsys)
    assert code == 0, lines
    assert ran == [[".lock", "config.yaml"]]  # a fresh out_dir
    (aside,) = [p for p in tmp_path.iterdir() if p.name.startswith("grpo.replaced-")]
    assert snapshot(aside) == before


def test_resume_and_overwrite_together_are_refused(tmp_path, capsys):
    code, lines, _ = run_cli(["grpo", "resume=true", "overwrite=true", f"out_dir={tmp_path / 'r'}"], capsys)
    assert_one_line_error(code, lines, "resume=true and overwrite=true contradict each other")


# ------------------------------------------------------------------ 4. eval with a model that does not load


@pytest.mark.parametrize("damage, message", [
    (lambda d: (d / "tokenizer.json").write_text("garbage\n" * 49), "tokenizer.json is not valid JSON"),
    (lambda d: (d / "config.json").write_text(json.dumps({"model_type": "qwen99"})),
     "model_type 'qwen99' is not a model this transformers knows"),
    (lambda d: (d / "config.json").write_text(json.dumps({"model_type": "qwen3", "hidden_size": 16, "vocab_size": 8})),
     "does not match the weights: embed_tokens is 8 x 4"),
    (lambda d: (d / "model.safetensors.index.json").write_text("{garbage"),
     "model.safetensors.index.json is not valid JSON"),
    (lambda d: (d / "tokenizer.json").write_text("{}"), "the tokenizer at"),  # valid JSON: fails only when loaded
])
def test_an_eval_whose_model_fails_to_load_leaves_a_finished_eval_as_it_was(tmp_path, capsys, damage, message):
    out = tmp_path / "run"
    code, lines, _ = run_cli([*CHOICE_EVAL, f"out_dir={out}"], capsys)
    assert code == 0, lines
    before = snapshot(out)
    model = shaped_checkpoint(tmp_path / "model")
    damage(model)
    args = ["eval", "env.name=choice", "policy=hf", f"model.path={model}", "split=test", "limit=2",
            "env.num_workers=1", "logger.progress=false", f"out_dir={out}"]
    code, lines, _ = run_cli(args, capsys)
    assert_one_line_error(code, lines, message)
    assert snapshot(out) == before
    code, lines, _ = run_cli([*CHOICE_EVAL, "seed=1", f"out_dir={out}"], capsys)  # a later refusal
    assert_one_line_error(code, lines, "another configuration")
    assert snapshot(out) == before


def test_a_folder_with_only_a_garbage_config_names_config_json(tmp_path, capsys):
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("not json")
    code, lines, _ = run_cli(["sft", f"model.path={model}", f"sft.data={tmp_path}", f"out_dir={tmp_path / 'o'}"],
                             capsys)
    assert_one_line_error(code, lines, "config.json is not valid JSON")
    assert snapshot(tmp_path / "o") is None


def test_out_dir_that_is_a_file_is_one_line(tmp_path, capsys):
    target = tmp_path / "file"
    target.write_text("mine\n")
    code, lines, _ = run_cli([*CHOICE_EVAL, f"out_dir={target}"], capsys)
    assert_one_line_error(code, lines, f"out_dir={target} is a file")
    assert target.read_text() == "mine\n"


# ------------------------------------------------------------------ 5. secrets


class EchoServer:
    """An OpenAI-compatible endpoint that answers every request 401 and quotes the key it was sent."""

    def __enter__(self):
        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 (http.server API)
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                scheme, _, credential = self.headers.get("Authorization", "").partition(" ")
                if scheme == "Basic":  # the URL's user:password
                    credential += " = " + base64.b64decode(credential).decode()
                body = json.dumps({"error": {"message": f"Incorrect API key provided: {credential}",
                                             "code": "invalid_api_key"}})
                self.send_response(401)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body.encode())

            def log_message(self, *args):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        return f"127.0.0.1:{self.httpd.server_port}"

    def __exit__(self, *exc):
        self.httpd.shutdown()
        self.httpd.server_close()


def _grep(root: Path, secret: str) -> list[str]:
    return [str(p) for p in root.rglob("*") if p.is_file() and secret.encode() in p.read_bytes()]


def test_a_multirun_eval_writes_no_key_anywhere(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("SERVICE_TOKEN", "sk-planted-token-42")
    out = tmp_path / "sweep"
    with EchoServer() as host:
        url = f"http://user:sk-planted-url-17@{host}/v1?key=sk-planted-query-9"
        code, lines, stdout = run_cli(["eval", "--multirun", "env.name=choice", "policy=openai",
                                       f"policy.base_url='{url}'", "policy.api_key_env=SERVICE_TOKEN",
                                       "policy.model_name=m", "policy.max_retries=0", "split=test", "limit=1",
                                       "env.num_workers=1", "logger.progress=false", "seed=0,1", f"out_dir={out}"],
                                      capsys)
    assert code == 1
    assert (out / "multirun.yaml").is_file() and (out / "0" / "summary.json").is_file()  # out_dir is the sweep dir
    assert "Incorrect API key provided" in (out / "0" / "summary.json").read_text()
    for secret in ("sk-planted-token-42", "sk-planted-url-17", "sk-planted-query-9"):
        assert _grep(out, secret) == [], secret
        assert not any(secret in line for line in lines) and secret not in stdout

    with EchoServer() as host:  # without a user in the URL the client sends the key itself (Bearer)
        code, lines, stdout = run_cli(["eval", "env.name=choice", "policy=openai", f"policy.base_url=http://{host}/v1",
                                       "policy.api_key_env=SERVICE_TOKEN", "policy.model_name=m",
                                       "policy.max_retries=0", "split=test", "limit=1", "env.num_workers=1",
                                       "logger.progress=false", f"out_dir={out / 'bearer'}"], capsys)
    assert code == 1 and "Incorrect API key provided" in (out / "bearer" / "summary.json").read_text()
    assert _grep(out, "sk-planted-token-42") == [] and not any("sk-planted-token-42" in line for line in lines)

    site = tmp_path / "site"  # view and report over the run write no key either
    code, lines, _ = run_cli(["view", f"runs=[{out / '0'}]", f"out_dir={site}"], capsys)
    assert code == 0, lines
    code, lines, _ = run_cli(["report", f"runs=[{out / '0'}]", f"out_dir={tmp_path / 'report'}"], capsys)
    assert code == 0, lines
    for secret in ("sk-planted-token-42", "sk-planted-url-17", "sk-planted-query-9"):
        assert _grep(site, secret) == [] and _grep(tmp_path / "report", secret) == []


def test_a_grpo_run_writes_no_key_anywhere(tmp_path, capsys, monkeypatch):
    """GRPO with an openai consolidator whose server quotes the key in its 401: config.yaml, multirun.yaml, run.log,
    history.jsonl, checkpoints and trajectories, then `view` and `report` over the run, hold no planted key."""
    from evoharness_rl.models import init_model

    monkeypatch.setenv("SERVICE_TOKEN", "sk-planted-token-42")
    model = init_model("tiny", tmp_path / "model")
    out = tmp_path / "sweep"
    with EchoServer() as host:
        url = f"http://user:sk-planted-url-17@{host}/v1?key=sk-planted-query-9"
        code, lines, stdout = run_cli(["grpo", "--multirun", "env.name=choice", "device=cpu", f"model.path={model}",
                                       f"policy.base_url='{url}'", "experience.consolidator=openai",
                                       f"experience.base_url='{url}'", "experience.api_key_env=SERVICE_TOKEN",
                                       "experience.model_name=m", "experience.max_retries=0", "grpo.updates=1",
                                       "grpo.prompts_per_update=2", "grpo.group_size=2",
                                       "grpo.mini_batch_trajectories=4", "grpo.micro_batch_samples=4",
                                       "policy.max_new_tokens=8", "env.max_steps_train=2", "grpo.eval_every=0",
                                       "env.num_workers=1", "logger.progress=false", "seed=0", f"out_dir={out}"],
                                      capsys)
    assert code == 0, lines
    assert (out / "multirun.yaml").is_file() and (out / "0" / "final").is_dir()
    assert "the consolidator call failed" in (out / "0" / "history.jsonl").read_text()  # the 401 was recorded
    site, report = tmp_path / "site", tmp_path / "report"
    code, lines2, stdout2 = run_cli(["view", f"runs=[{out / '0'}]", f"out_dir={site}"], capsys)
    assert code == 0, lines2
    code, lines3, stdout3 = run_cli(["report", f"runs=[{out / '0'}]", f"out_dir={report}"], capsys)
    assert code == 0, lines3
    for secret in ("sk-planted-token-42", "sk-planted-url-17", "sk-planted-query-9"):
        assert _grep(out, secret) == [] and _grep(site, secret) == [] and _grep(report, secret) == [], secret
        assert secret not in "\n".join([*lines, *lines2, *lines3, stdout, stdout2, stdout3]), secret


def test_redact_text_removes_url_secrets_and_named_secrets():
    from evoharness_rl.runlog import REDACTED, redact_text, secrets_in

    url = "http://user:sk-abc123@host:8/v1?key=zz-987"
    secrets = secrets_in({"policy": {"base_url": url}})
    assert {"sk-abc123", "zz-987"} <= secrets
    text = redact_text(f"- policy.base_url='{url}' and 401: bad key sk-abc123", secrets)
    assert "sk-abc123" not in text and "zz-987" not in text
    assert f"http://{REDACTED}@host:8/v1?{REDACTED}" in text
    assert redact_text("http://127.0.0.1:8000/v1 fine") == "http://127.0.0.1:8000/v1 fine"


# ------------------------------------------------------------------ 7. non-finite floats


@pytest.mark.parametrize("override", ["policy.temperature=nan", "grpo.learning_rate=inf", "grpo.temperature=nan",
                                      "grpo.clip_eps=nan", "grpo.kl_coef=inf", "grpo.max_grad_norm=nan",
                                      "reward.success_scale=-inf", "reward.lambda_eff=nan"])
def test_non_finite_floats_are_refused(tmp_path, capsys, override):
    out = tmp_path / "run"
    code, lines, _ = run_cli([*CHOICE_EVAL, override, f"out_dir={out}"], capsys)
    assert code == 2
    assert_one_line_error(code, lines, f"{override.split('=')[0]}=", "is not a finite number")
    assert snapshot(out) is None


# ------------------------------------------------------------------ 8. multirun


@pytest.mark.parametrize("override, message", [
    ("limit=1,-1", "limit=-1 must be > 0 (in the sweep's job with limit=-1)"),
    ("experiment=nonexistent", "experiment=nonexistent: no such experiment; choose one of demo"),
    ("limit=abc", "could not be converted to Integer; the key takes an integer"),
])
def test_every_swept_value_is_checked_before_the_first_job(tmp_path, capsys, override, message):
    out = tmp_path / "sweep"
    code, lines, _ = run_cli([*CHOICE_EVAL, "--multirun", override, f"out_dir={out}"], capsys)
    assert code == 2
    assert_one_line_error(code, lines, "invalid configuration", message)
    assert snapshot(out) is None


def test_a_swept_out_dir_is_refused(tmp_path, capsys):
    code, lines, _ = run_cli([*CHOICE_EVAL, "--multirun", f"out_dir={tmp_path}/a,{tmp_path}/b"], capsys)
    assert_one_line_error(code, lines, "out_dir cannot be swept")


# ------------------------------------------------------------------ 11. harness grammar


@pytest.mark.parametrize("action", ["recall [x] go to [y]", "recall [x] [y]", "track [egg] then go to fridge 1]"])
def test_nothing_may_follow_a_harness_calls_bracket(action):
    parsed = parse_response(f"<action>{action}</action>")
    assert parsed.kind is ActionKind.INVALID and "nothing after it" in parsed.reason


@pytest.mark.parametrize("action, argument", [("note [[nested] brackets]", "nested] brackets"),
                                              ("recall [[x]]", "x"), ("commit [go [to] x]", "go [to] x")])
def test_brackets_inside_the_argument_stay_allowed(action, argument):
    parsed = parse_response(f"<action>{action}</action>")
    assert parsed.kind is ActionKind.HARNESS and parsed.action == argument


# ------------------------------------------------------------------ 6, 9. Experience bank path and environment


def _webshop_bank(folder: Path) -> Path:
    from evoharness_rl.experience import ExperienceBank
    from evoharness_rl.experience.operations import Operation

    bank = ExperienceBank()
    bank.apply([Operation("add", category="search", subject="shoes", principle="shoes: search by size")], "seed")
    bank.claim_env("webshop")
    return bank.save(folder / "bank.json")


def test_a_bank_knows_its_environment_and_refuses_another(tmp_path, capsys):
    from evoharness_rl.experience import ExperienceBank
    from evoharness_rl.rollout.trajectory import write_jsonl
    from tests.experience import synthetic

    bank = _webshop_bank(tmp_path / "seed")
    model = fake_checkpoint(tmp_path / "model")
    assert ExperienceBank.load(bank).env == "webshop"
    raw = bank.read_bytes()
    write_jsonl(tmp_path / "t.jsonl", synthetic.batch(4))
    for args in (["consolidate", "env=alfworld", f"experience.trajectories={tmp_path / 't.jsonl'}"],
                 ["eval", "env=alfworld", "policy=scripted"], ["grpo", "env=alfworld", f"model.path={model}"]):
        out = tmp_path / f"run-{args[0]}"
        code, lines, _ = run_cli([*args, f"experience.bank={bank}", "logger.progress=false", f"out_dir={out}"],
                                 capsys)
        assert_one_line_error(code, lines, f"experience.bank={bank} is a webshop Experience bank; env=alfworld "
                                           "cannot use it")
        assert snapshot(out) is None and bank.read_bytes() == raw


def test_consolidate_refuses_bad_trajectories_before_writing(tmp_path, capsys):
    from evoharness_rl.rollout.trajectory import write_jsonl
    from tests.experience import synthetic

    trajectories = synthetic.batch(4)
    trajectories[1].env = "webshop"  # one WebShop episode among ALFWorld ones: the bank would mix both
    write_jsonl(tmp_path / "t.jsonl", trajectories)
    out = tmp_path / "run"
    out.mkdir()
    (out / "notes.txt").write_text("mine\n")
    before = snapshot(out)
    code, lines, _ = run_cli(["consolidate", "env=alfworld", f"experience.trajectories={tmp_path / 't.jsonl'}",
                              "logger.progress=false", f"out_dir={out}"], capsys)
    assert_one_line_error(code, lines, "holds webshop episodes; a bank is one environment's", "env=webshop")
    assert snapshot(out) == before
    code, lines, _ = run_cli(["consolidate", "env=alfworld", f"experience.trajectories={tmp_path / 'nope'}",
                              "logger.progress=false", f"out_dir={out}"], capsys)
    assert_one_line_error(code, lines, f"experience.trajectories={tmp_path / 'nope'} does not exist")
    assert snapshot(out) == before


def test_consolidate_tags_the_bank_it_writes(tmp_path, capsys):
    from evoharness_rl.experience import ExperienceBank
    from evoharness_rl.rollout.trajectory import write_jsonl
    from tests.experience import synthetic

    write_jsonl(tmp_path / "t.jsonl", synthetic.batch(4))
    out = tmp_path / "run"
    code, lines, _ = run_cli(["consolidate", "env=alfworld", f"experience.trajectories={tmp_path / 't.jsonl'}",
                              "logger.progress=false", f"out_dir={out}"], capsys)
    assert code == 0, lines
    assert ExperienceBank.load(out / "bank.json").env == "alfworld"
    before = snapshot(out)
    code, lines, _ = run_cli(["consolidate", "env=alfworld", f"experience.trajectories={tmp_path / 't.jsonl'}",
                              "logger.progress=false", f"out_dir={out}"], capsys)  # a second run: refused
    assert_one_line_error(code, lines, f"{out} already holds a consolidated bank (bank.json", "overwrite=true")
    assert snapshot(out) == before


@pytest.mark.parametrize("command", ["eval", "grpo", "collect", "consolidate"])
def test_a_missing_bank_path_is_one_line_before_anything_loads(tmp_path, capsys, command):
    from evoharness_rl.rollout.trajectory import write_jsonl
    from tests.experience import synthetic

    model = fake_checkpoint(tmp_path / "model")  # never loads: the bank is refused first
    write_jsonl(tmp_path / "t.jsonl", synthetic.batch(4))
    out = tmp_path / "run"
    code, lines, _ = run_cli([command, "env=alfworld", "policy=hf", f"model.path={model}", "experience.bank=/nope.json",
                              f"experience.trajectories={tmp_path / 't.jsonl'}", f"out_dir={out}"], capsys)
    assert_one_line_error(code, lines, "experience.bank='/nope.json' does not exist",
                          "use experience.bank=null to start an empty bank")
    assert snapshot(out) is None


def test_a_damaged_newest_grpo_checkpoint_falls_back_to_the_previous_one(tmp_path):
    import torch

    from evoharness_rl.grpo.checkpoint import latest_usable_checkpoint

    for update in (2, 4):
        folder = tmp_path / "checkpoints" / f"update_{update:06d}"
        folder.mkdir(parents=True)
        (folder / "trainer_state.json").write_text(json.dumps({"update": update}))
        torch.save({"state": torch.zeros(64)}, folder / "optimizer.bin")
    newest = tmp_path / "checkpoints" / "update_000004" / "optimizer.bin"
    assert latest_usable_checkpoint(tmp_path).name == "update_000004"
    newest.write_bytes(newest.read_bytes()[:300])
    notes = []
    assert latest_usable_checkpoint(tmp_path, notes.append).name == "update_000002"
    assert notes == ["checkpoint update_000004 is not usable (optimizer.bin is damaged or truncated); falling back "
                     "to the one before it"]


def test_a_grpo_resume_with_no_usable_checkpoint_is_refused_before_anything_loads(tmp_path, capsys):
    model = fake_checkpoint(tmp_path / "model")  # never loads
    out = _finished_grpo(tmp_path, model)
    (out / "checkpoints" / "update_000004" / "optimizer.bin").write_bytes(b"PK\x03\x04 truncated")
    before = snapshot(out)
    code, lines, _ = run_cli(["grpo", f"model.path={model}", "grpo.learning_rate=3e-4", "resume=true",
                              f"out_dir={out}"], capsys)
    assert_one_line_error(code, lines, f"no checkpoint of {out} is usable (the newest, update_000004: optimizer.bin "
                                       "is damaged or truncated)", "overwrite=true")
    assert snapshot(out) == before


@pytest.mark.parametrize("data, split, message", [
    ("games", "test", "ALFWorld has no split 'test'; splits: train, valid_seen, valid_unseen (set split=...)"),
    ("games", "train", "games/train does not exist; expected the layout"),
    ("games", "valid_unseen", "split 'valid_unseen' of env 'alfworld' has no tasks; run `evoharness-rl prepare`"),
    ("nowhere", "valid_unseen", "nowhere does not exist; expected the layout"),
])
def test_missing_environment_data_leaves_a_finished_eval_as_it_was(tmp_path, capsys, data, split, message):
    pytest.importorskip("alfworld")
    out = tmp_path / "run"
    code, lines, _ = run_cli([*CHOICE_EVAL, f"out_dir={out}"], capsys)
    assert code == 0, lines
    before = snapshot(out)
    (tmp_path / "games" / "valid_unseen").mkdir(parents=True)  # a split folder without games
    code, lines, _ = run_cli(["eval", "env=alfworld", f"env.data_path={tmp_path / data}", "policy=scripted",
                              f"split={split}", "limit=1", "logger.progress=false", f"out_dir={out}"], capsys)
    assert_one_line_error(code, lines, message)
    assert snapshot(out) == before


def test_a_split_the_environment_does_not_have_is_a_refusal():
    from evoharness_rl.errors import Refusal
    from evoharness_rl.eval.evaluate import split_tasks

    class NoTest:
        def task_ids(self, split):
            raise ValueError(f"ALFWorld has no split {split!r}; splits: train, valid_seen, valid_unseen")

        def close(self):
            pass

    with pytest.raises(Refusal, match=r"^ALFWorld has no split 'test'; splits: train, valid_seen, valid_unseen"):
        split_tasks(NoTest, "test")
