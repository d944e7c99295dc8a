"""SFT data: flattening, dedup, mixing, splits, stats, prompt-version checks, tokenization and truncation."""

from __future__ import annotations

import json
import sys
import types

import pytest

from evoharness_rl.envs.base import EnvSpec
from evoharness_rl.models import load_tokenizer
from evoharness_rl.rollout.trajectory import write_jsonl
from evoharness_rl.sft import data
from tests.sft.conftest import PLAN, SYSTEM, make_trajectory

VALID_TURNS = sum(kind != "invalid" for kind, _, _ in PLAN)


def test_per_turn_examples_are_the_prompts_the_policy_saw():
    traj = make_trajectory(1)
    examples = data.build_examples([traj, make_trajectory(2, won=False)], prompt_version="1")
    assert len(examples) == VALID_TURNS  # the failed episode and the invalid turn are skipped
    first = examples[0]
    assert first["messages"][:2] == traj.turns[0].messages
    assert first["messages"][2] == {"role": "assistant", "content": traj.turns[0].response}
    assert (first["env"], first["family"], first["prompt_version"], first["context"]) == \
        ("alfworld", "pick_and_place", "1", "per_turn")
    assert first["action_kinds"] == ["harness"] and first["verbs"] == ["commit"]
    assert [e["verbs"][0] for e in examples].count("track") == 1
    assert "invalid" not in {e["action_kinds"][0] for e in examples}


def test_accumulated_example_is_one_conversation_with_invalid_turns_out_of_the_loss():
    traj = make_trajectory(3, context="accumulated")
    [example] = data.build_examples([traj], prompt_version="1")
    roles = [m["role"] for m in example["messages"]]
    assert roles == ["system"] + ["user", "assistant"] * len(PLAN)  # no duplicated assistant messages
    assert [m["content"] for m in example["messages"] if m["role"] == "assistant"] == [t.response for t in traj.turns]
    assert example["train_turns"] == [int(kind != "invalid") for kind, _, _ in PLAN]


def test_identical_examples_are_deduplicated():
    examples = data.build_examples([make_trajectory(1), make_trajectory(1), make_trajectory(2)], prompt_version="1")
    assert len(examples) == 2 * VALID_TURNS


def test_context_mismatch_and_stale_prompt_version_are_rejected():
    with pytest.raises(data.SFTDataError, match="context='accumulated'"):
        data.build_examples([make_trajectory(1)], prompt_version="1", context="accumulated")
    with pytest.raises(data.SFTDataError, match=r"prompt version '1'.*prompt version '2'"):
        data.build_examples([make_trajectory(1, prompt_version="1")], prompt_version="2")


def test_mix_weights_multiply_collection_sizes_and_drop_cross_duplicates():
    a = data.build_examples([make_trajectory(1)], "1")
    b = data.build_examples([make_trajectory(2), make_trajectory(3)], "1")
    mixed = data.mix([(a, 2.0), (b, 0.5), (a, 1.0)], seed=0)
    # a twice; half of b; the second copy of a is entirely duplicates of the first
    assert len(mixed) == 2 * len(a) + round(0.5 * len(b))
    with pytest.raises(data.SFTDataError, match="negative"):
        data.mix([(a, -1.0)])


def test_successful_reports_counts_when_nothing_succeeded():
    with pytest.raises(data.SFTDataError, match="3 episodes collected, 0 succeeded"):
        data.successful([make_trajectory(i, won=False) for i in range(3)], "run/x")


def test_read_collection_reads_trajectory_jsonl_and_skips_other_jsonl(tmp_path):
    write_jsonl(tmp_path / "trajectories.jsonl", [make_trajectory(1), make_trajectory(2, won=False)])
    (tmp_path / "metrics.jsonl").write_text(json.dumps({"step": 0, "loss": 1.0}) + "\n")
    (tmp_path / "other.jsonl").write_text(json.dumps({"step": 0}) + "\n")
    trajectories = data.read_collection(tmp_path)
    assert [t.won for t in trajectories] == [True, False]
    assert trajectories[0].prompt_version == "1" and trajectories[0].turns[1].verb is None
    with pytest.raises(data.SFTDataError, match="does not exist"):
        data.read_collection(tmp_path / "missing")


def test_save_and_load_dataset_splits_by_episode_with_stats(tmp_path, tiny_model):
    tokenizer = load_tokenizer(tiny_model)
    examples = data.build_examples([make_trajectory(i) for i in range(10)], "1")
    saved = data.save_dataset(examples, tmp_path / "ds", validation_fraction=0.2, seed=0, tokenizer=tokenizer)
    train_eps, val_eps = set(saved["train"]["episode"]), set(saved["validation"]["episode"])
    assert len(val_eps) == 2 and not train_eps & val_eps
    assert len(saved["train"]) + len(saved["validation"]) == len(examples)
    stats = json.loads((tmp_path / "ds" / "stats.json").read_text())
    assert stats["prompt_versions"] == {"alfworld": "1"}
    assert stats["train"]["examples"] == len(saved["train"]) and stats["train"]["tokens"] > 0
    # per episode: 6 trained turns, of which commit 1 and track 1
    assert stats["train"]["harness_share_by_verb"] == {"commit": round(1 / 6, 4), "track": round(1 / 6, 4)}
    loaded = data.load_sft_dataset(tmp_path / "ds", expected_prompt_version="1")
    assert loaded["train"][0]["messages"] == saved["train"][0]["messages"]
    assert not list(tmp_path.glob(".ds.*"))  # no staging directory left behind


def test_load_rejects_dataset_built_with_another_prompt_version(tmp_path):
    data.save_dataset(data.build_examples([make_trajectory(1)], "1"), tmp_path / "ds", 0.0)
    with pytest.raises(data.SFTDataError, match=r"prompt version '1'.*prompt version '2'"):
        data.load_sft_dataset(tmp_path / "ds", expected_prompt_version={"alfworld": "2"})
    with pytest.raises(data.SFTDataError, match="not an SFT dataset"):
        data.load_sft_dataset(tmp_path, "1")


def test_prompt_version_comes_from_the_registered_spec_without_building_the_env(monkeypatch, tmp_path):
    import evoharness_rl.envs as envs

    spec = EnvSpec(name="fakeenv", system_prompts={"adaptive": "s"}, turn_template="{observation}",
                   prompt_version="7")

    def build(env_cfg):
        raise AssertionError("the env must not be built to learn its prompt version")

    monkeypatch.setitem(envs._REGISTRY, "fakeenv", envs.EnvEntry(build, spec=spec))
    assert data.current_prompt_version("fakeenv") == "7"
    # compact-prompt episodes carry their own version, so a paper-prompt dataset is rejected under compact
    assert data.current_prompt_version("fakeenv", types.SimpleNamespace(prompt_style="compact")) == "7+compact"
    with pytest.raises(data.SFTDataError, match="no EnvSpec found for env 'no_such_env'"):
        data.current_prompt_version("no_such_env")
    # ALFWorld's version needs no generated games (`sft sft.data=DIR` with an empty env.data_dir)
    from evoharness_rl.config import EnvConfig
    from evoharness_rl.envs.alfworld.prompts import PROMPT_VERSION

    assert data.current_prompt_version("alfworld", EnvConfig(data_dir=str(tmp_path / "none"))) == PROMPT_VERSION


# ---------------------------------------------------------------------------- tokenization


def _labelled_text(tokenizer, row) -> str:
    return tokenizer.decode([t for t, label in zip(row["input_ids"], row["labels"]) if label != -100])


def test_labels_cover_exactly_the_assistant_response(tiny_model):
    tokenizer = load_tokenizer(tiny_model)
    [example] = data.build_examples([make_trajectory(1)], "1")[:1]
    row = data.tokenize_example(tokenizer, example, max_length=4096)
    assert row["status"] == "ok"
    assert _labelled_text(tokenizer, row) == example["messages"][-1]["content"] + "<|im_end|>"
    prompt = data.chat_ids(tokenizer, example["messages"][:-1], add_generation_prompt=True)
    assert row["input_ids"][: len(prompt)] == prompt  # the rollout prompt is a token prefix
    assert all(label == -100 for label in row["labels"][: len(prompt)])


def test_accumulated_labels_skip_invalid_turns(tiny_model):
    tokenizer = load_tokenizer(tiny_model)
    [example] = data.build_examples([make_trajectory(1, context="accumulated")], "1")
    row = data.tokenize_example(tokenizer, example, max_length=8192)
    trained = [m["content"] for m, keep in zip(
        [m for m in example["messages"] if m["role"] == "assistant"], example["train_turns"]) if keep]
    assert _labelled_text(tokenizer, row) == "".join(t + "<|im_end|>" for t in trained)
    assert "fly away" not in _labelled_text(tokenizer, row)


def test_over_length_prompt_is_cut_in_the_middle_keeping_system_and_response(tiny_model):
    tokenizer = load_tokenizer(tiny_model)
    [example] = data.build_examples([make_trajectory(1)], "1")[:1]
    example["messages"][1]["content"] += " filler" * 2000
    head = len(data.chat_ids(tokenizer, example["messages"][:1]))
    row = data.tokenize_example(tokenizer, example, max_length=1024)
    assert row["status"] == "truncated" and len(row["input_ids"]) == 1024
    assert tokenizer.decode(row["input_ids"][:head]).startswith("<|im_start|>system\n" + SYSTEM[:50])
    assert _labelled_text(tokenizer, row) == example["messages"][-1]["content"] + "<|im_end|>"


def test_example_whose_response_cannot_fit_is_dropped_and_counted(tiny_model):
    import datasets

    tokenizer = load_tokenizer(tiny_model)
    examples = data.build_examples([make_trajectory(1)], "1")[:2]
    examples[1]["messages"][-1]["content"] = "<think>" + "very long thought " * 800 + "</think><action>look</action>"
    split = datasets.Dataset.from_list(examples)
    tokenized, counts = data.tokenize_examples(split, tokenizer, max_length=1024)
    assert counts == {"examples": 2, "truncated": 0, "dropped": 1}
    assert len(tokenized) == 1 and max(len(ids) for ids in tokenized["input_ids"]) <= 1024
