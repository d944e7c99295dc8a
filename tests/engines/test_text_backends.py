"""scripted and replay backends, and the make_backend factory."""

from __future__ import annotations

import json

import pytest

from evoharness_rl.config import Config, ModelConfig, PolicyConfig
from evoharness_rl.engines import make_backend
from evoharness_rl.engines.base import GenerationRequest, SamplingSettings
from evoharness_rl.engines.replay import ReplayBackend
from evoharness_rl.engines.scripted import ScriptedBackend


def _request(key, teacher=None):
    return GenerationRequest(messages=[{"role": "user", "content": "obs"}], key=key, teacher=teacher)


def test_scripted_returns_the_teachers_response():
    backend = ScriptedBackend()
    assert not backend.uses_tokens and backend.needs_teacher
    out = backend.generate([_request("a", lambda: "<action>look</action>"), _request("b", lambda: "x")],
                           SamplingSettings())
    assert [c.text for c in out] == ["<action>look</action>", "x"]
    assert all(c.completion_ids == [] and c.logprobs == [] for c in out)


def test_scripted_without_teacher_is_an_error():
    with pytest.raises(ValueError, match="no teacher"):
        ScriptedBackend().generate([_request("a")], SamplingSettings())


def test_replay_restarts_for_each_episode_and_runs_out(tmp_path):
    path = tmp_path / "responses.json"
    path.write_text(json.dumps(["r1", "r2"]))
    backend = ReplayBackend(path)
    assert [c.text for c in backend.generate([_request("e1"), _request("e2")], SamplingSettings())] == ["r1", "r1"]
    assert [c.text for c in backend.generate([_request("e1")], SamplingSettings())] == ["r2"]
    assert [c.text for c in backend.generate([_request("e1"), _request("e2")], SamplingSettings())] == ["", "r2"]
    backend.reset("e1")
    assert backend.generate([_request("e1")], SamplingSettings())[0].text == "r1"


@pytest.mark.parametrize("content, message", [
    ("{not json", "not valid JSON"),
    ('{"a": 1}', "holds a JSON dict"),
    ('["ok", 3]', "entry 1 is a int"),
])
def test_replay_malformed_file_names_the_problem(tmp_path, content, message):
    path = tmp_path / "bad.json"
    path.write_text(content)
    with pytest.raises(ValueError, match=message):
        ReplayBackend(path)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        ReplayBackend(tmp_path / "missing.json")


def test_make_backend_text_kinds(tmp_path):
    path = tmp_path / "r.json"
    path.write_text('["a"]')
    assert isinstance(make_backend(PolicyConfig(backend="scripted")), ScriptedBackend)
    assert isinstance(make_backend(PolicyConfig(backend="replay", path=str(path))), ReplayBackend)
    with pytest.raises(ValueError, match="policy.path"):
        make_backend(PolicyConfig(backend="replay"))
    openai = make_backend(PolicyConfig(backend="openai", base_url="http://127.0.0.1:9/v1", model_name="m"))
    assert openai.model == "m" and not openai.uses_tokens


def test_make_backend_hf_from_whole_config(tiny_model_dir):
    from evoharness_rl.engines.hf import HFBackend

    cfg = Config(out_dir="unused", device="cpu")
    cfg.policy.backend, cfg.policy.batch_size, cfg.model.path = "hf", 3, str(tiny_model_dir)
    backend = make_backend(cfg)
    assert isinstance(backend, HFBackend) and backend.batch_size == 3 and backend.tokenizer.chat_template
    with pytest.raises(ValueError, match="model.path is not set"):
        make_backend(PolicyConfig(backend="hf"), ModelConfig())


def test_a_vllm_engine_is_sized_for_the_whole_accumulated_conversation():
    """max_model_len: a per_turn prompt and its completion, or an accumulated conversation's first prompt and cap."""
    from evoharness_rl.engines import context_tokens

    p = PolicyConfig(max_prompt_tokens=2048, max_new_tokens=512, max_trajectory_tokens=8192)
    assert context_tokens(p, "per_turn") == 2048 + 512
    assert context_tokens(p, "accumulated") == 2048 + 8192
