"""run_sft: assistant-only loss through TRL's collator, bad input, and end-to-end runs on the tiny model."""

from __future__ import annotations

import json

import pytest
import torch

from evoharness_rl.config import Config
from evoharness_rl.models import load_tokenizer
from evoharness_rl.rollout.trajectory import write_jsonl
from evoharness_rl.runlog import read_metrics
from evoharness_rl.sft import data
from evoharness_rl.sft.trainer import build_trainer, prepare_dataset, run_sft
from tests.sft.conftest import make_trajectory


def sft_config(tmp_path, model: str, data_path: str, **sft) -> Config:
    cfg = Config(command="sft", out_dir=str(tmp_path / "run"), device="cpu")
    cfg.model.path = model
    cfg.sft.data = data_path
    cfg.sft.per_device_batch_size = 8
    cfg.sft.logging_steps = 2
    cfg.sft.validation_fraction = 0.1
    for key, value in sft.items():
        setattr(cfg.sft, key, value)
    return cfg


def collection(tmp_path, env: str, n: int = 12, context: str = "per_turn", won: bool = True) -> str:
    folder = tmp_path / "collect"
    write_jsonl(folder / "trajectories.jsonl", [make_trajectory(i, context, won, env=env) for i in range(n)])
    return str(folder)


def test_collator_output_trains_only_assistant_tokens(tmp_path, tiny_model, fake_env):
    """Prompt (system + objective + observation) and template tokens carry no loss; responses do."""
    cfg = sft_config(tmp_path, tiny_model, collection(tmp_path, fake_env, n=3, context="accumulated"),
                     validation_fraction=0.0)
    tokenizer = load_tokenizer(tiny_model)
    dataset = prepare_dataset(cfg, tokenizer, log=None)
    train, _ = data.tokenize_examples(dataset["train"], tokenizer, 4096)
    trainer = build_trainer(cfg, "cpu", tokenizer, train, None, log=None)
    rows = [trainer.train_dataset[i] for i in range(len(trainer.train_dataset))]
    batch = trainer.data_collator(rows)
    for row, ids, labels, example in zip(rows, batch["input_ids"], batch["labels"], dataset["train"]):
        trained = ids[labels != -100].tolist()
        responses = [m["content"] for m, keep in zip(
            [m for m in example["messages"] if m["role"] == "assistant"], example["train_turns"]) if keep]
        assert tokenizer.decode(trained) == "".join(r + "<|im_end|>" for r in responses)
        assert (labels[: len(row["input_ids"])] != -100).sum() < len(row["input_ids"]) / 3  # most tokens masked
        assert (labels[len(row["input_ids"]):] == -100).all()  # padding masked
        masked_text = tokenizer.decode(ids[labels == -100][: len(row["input_ids"])].tolist())
        assert "OBJECTIVE: put mug" in masked_text and "OBSERVATION: result of" in masked_text


def test_supervised_head_loss_matches_trls_loss_on_a_collated_batch(tmp_path, tiny_model, fake_env):
    """The CPU loss (LM head on supervised positions only) equals TRL's own on the same batch, metrics too."""
    from trl import SFTTrainer

    cfg = sft_config(tmp_path, tiny_model, collection(tmp_path, fake_env, n=4), validation_fraction=0.0)
    tokenizer = load_tokenizer(tiny_model)
    train, _ = data.tokenize_examples(prepare_dataset(cfg, tokenizer, log=None)["train"], tokenizer, 4096)
    trainer = build_trainer(cfg, "cpu", tokenizer, train, None, log=None)
    batch = trainer.data_collator([trainer.train_dataset[i] for i in range(len(trainer.train_dataset))])
    n_items = int((batch["labels"][:, 1:] != -100).sum()) * 2  # as if the optimizer step had two such batches
    ours = trainer.compute_loss(trainer.model, dict(batch), num_items_in_batch=n_items)
    accuracy = trainer._metrics["train"]["mean_token_accuracy"][-1]
    theirs = SFTTrainer.compute_loss(trainer, trainer.model, dict(batch), num_items_in_batch=n_items)
    assert torch.allclose(ours, theirs, atol=1e-5) and ours > 0
    assert accuracy == pytest.approx(trainer._metrics["train"]["mean_token_accuracy"][-1], abs=1e-6)


def test_all_failed_collection_stops_with_counts(tmp_path, tiny_model, fake_env):
    cfg = sft_config(tmp_path, tiny_model, collection(tmp_path, fake_env, n=4, won=False))
    with pytest.raises(data.SFTDataError, match="4 episodes collected, 0 succeeded"):
        run_sft(cfg)


def test_missing_data_path_is_named(tmp_path, tiny_model):
    cfg = sft_config(tmp_path, tiny_model, None)
    with pytest.raises(data.SFTDataError, match="sft.data is not set"):
        run_sft(cfg)


def test_dataset_with_stale_prompt_version_is_rejected(tmp_path, tiny_model, fake_env):
    stale = tmp_path / "stale"
    examples = data.build_examples([make_trajectory(i, env=fake_env, prompt_version="0") for i in range(3)], "0")
    data.save_dataset(examples, stale, 0.0)
    cfg = sft_config(tmp_path, tiny_model, str(stale))
    with pytest.raises(data.SFTDataError, match=r"prompt version '0'.*prompt version '1'"):
        run_sft(cfg)


def _logits(model, ids):
    with torch.no_grad():
        return model(input_ids=ids).logits


@pytest.mark.slow
def test_full_parameter_sft_end_to_end_and_resume(tmp_path, tiny_model, fake_env):
    from transformers import AutoModelForCausalLM

    cfg = sft_config(tmp_path, tiny_model, collection(tmp_path, fake_env), lora=False, learning_rate=3e-3,
                     epochs=2.0, save_steps=8)
    merged = run_sft(cfg)
    model = AutoModelForCausalLM.from_pretrained(merged)
    base = AutoModelForCausalLM.from_pretrained(tiny_model)
    ids = torch.tensor([load_tokenizer(str(merged))("go to desk 1")["input_ids"]])
    assert not torch.allclose(_logits(model, ids), _logits(base, ids))
    train = [m for m in read_metrics(cfg.out_dir) if "loss" in m]
    assert train[-1]["loss"] < train[0]["loss"] and all(m["learning_rate"] >= 0 for m in train)
    assert any(m.get("tokens_per_s", 0) > 0 for m in train)
    assert any("eval_loss" in m for m in read_metrics(cfg.out_dir))
    stats = json.loads((tmp_path / "run" / "dataset" / "stats.json").read_text())
    assert stats["train"]["harness_share_by_verb"]["commit"] > 0
    # resume: the finished run's last checkpoint is picked up; no step is trained twice
    steps_before = max(m["step"] for m in train)
    cfg.resume = True
    run_sft(cfg)
    resumed = [m for m in read_metrics(cfg.out_dir) if "loss" in m]
    assert max(m["step"] for m in resumed) == steps_before
    assert "resuming from" in (tmp_path / "run" / "run.log").read_text()


@pytest.mark.slow
def test_lora_sft_trains_adapter_and_merge_matches(tmp_path, tiny_model, fake_env):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    cfg = sft_config(tmp_path, tiny_model, collection(tmp_path, fake_env, n=6), lora=True, lora_r=8, lora_alpha=16,
                     learning_rate=1e-3, epochs=1.0)
    merged = run_sft(cfg)
    adapter = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(tiny_model), cfg.out_dir + "/adapter")
    assert any(p.abs().sum() > 0 for n, p in adapter.named_parameters() if "lora_B" in n)  # the adapter trained
    ids = torch.randint(0, 3000, (2, 48))
    merged_logits = _logits(AutoModelForCausalLM.from_pretrained(merged), ids)
    assert torch.allclose(merged_logits, _logits(adapter.eval(), ids), atol=1e-4)
    assert not torch.allclose(merged_logits, _logits(AutoModelForCausalLM.from_pretrained(tiny_model), ids), atol=1e-4)


@pytest.mark.slow
def test_two_cpu_processes_share_one_dataset_and_log_once(tmp_path, tiny_model):
    """torchrun with 2 CPU processes (gloo DDP): the main process builds the dataset and logs; both train."""
    import subprocess
    import sys

    version = data.current_prompt_version("webshop")
    folder = tmp_path / "collect"
    write_jsonl(folder / "trajectories.jsonl",
                [make_trajectory(i, env="webshop", prompt_version=version) for i in range(6)])
    out = tmp_path / "run"
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "-m", "evoharness_rl", "sft",
               f"model.path={tiny_model}", f"sft.data={folder}", f"out_dir={out}", "sft=full", "sft.epochs=1",
               "sft.per_device_batch_size=4", "sft.logging_steps=1", "sft.validation_fraction=0", "device=cpu"]
    result = subprocess.run(command, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    train = [m for m in read_metrics(out) if "loss" in m]
    examples = json.loads((out / "dataset" / "stats.json").read_text())["train"]["examples"]
    assert [m["step"] for m in train] == list(range(1, -(-examples // 8) + 1))  # global batch 2 x 4, logged once
    assert (out / "run.log").read_text().count("tokenized") == 1
    assert (out / "merged" / "model.safetensors").is_file()


def test_progress_bar_shows_steps_and_tokens_per_second(monkeypatch):
    """MetricsCallback: the bar opens at the resumed step, advances a step at a time and carries the last tok/s."""
    from types import SimpleNamespace

    from evoharness_rl.sft import trainer as sft_trainer

    calls = []

    class Bar:
        def __init__(self, total, description, completed=0):
            calls.append(("open", total, description, completed))

        def advance(self, n=1, info=None):
            calls.append(("advance", n, info))

        def close(self):
            calls.append(("close",))

    monkeypatch.setattr(sft_trainer, "ProgressBar", Bar)
    logged = []
    callback = sft_trainer.MetricsCallback(SimpleNamespace(metrics=lambda step, **v: logged.append(v)))
    state = SimpleNamespace(max_steps=30, global_step=10)
    callback.on_train_begin(None, state, None)
    callback.on_step_end(None, state, None)
    callback.on_log(None, state, None, logs={"loss": 1.0, "num_tokens": 1000.0})
    callback._mark = (callback._mark[0] - 2.0, 1000.0)  # two seconds ago, 1000 tokens
    callback.on_log(None, state, None, logs={"loss": 0.9, "num_tokens": 13000.0})
    callback.on_step_end(None, state, None)
    callback.on_train_end(None, state, None)
    assert calls[0] == ("open", 30, "sft", 10) and calls[1] == ("advance", 1, None)
    assert calls[2][:2] == ("advance", 1) and calls[2][2].endswith("k tok/s") and calls[-1] == ("close",)
    assert 5.5 < float(calls[2][2].split("k")[0]) < 6.5  # 12,000 tokens in about two seconds
    assert logged[-1]["tokens_per_s"] > 0
