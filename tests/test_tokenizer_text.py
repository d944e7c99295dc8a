"""init-model's tokenizer text comes from the registry alone: each environment's `tokenizer_text`, and nothing from
an environment without one, so registering an environment leaves every tokenizer and model as it was."""

from __future__ import annotations

from pathlib import Path

from evoharness_rl.envs import EnvSpec, _REGISTRY, env_names, env_part, env_spec, register_env
from evoharness_rl.models import env_prompt_texts, training_corpus


def test_every_environment_with_tokenizer_text_gives_its_system_prompts():
    corpus = set(training_corpus(episodes=40))
    texts = env_prompt_texts()
    assert {"alfworld", "webshop", "webarena"} <= set(texts)
    for name in texts:
        source = env_part(name, "tokenizer_text")()
        assert all(f"system\n{prompt}" in corpus for prompt in source.system_prompts)
    webarena = env_spec("webarena")
    assert texts["webarena"] == (webarena.system_prompts["adaptive"], webarena.turn_template)


def test_registering_an_environment_without_tokenizer_text_changes_nothing():
    before = training_corpus(episodes=40)
    spec = EnvSpec(name="quiet", system_prompts={m: "A prompt no tokenizer should see." for m in
                                                 ("env_only", "always_on", "adaptive")}, turn_template="{observation}")
    register_env("quiet", lambda cfg: None, spec=spec)
    try:
        assert training_corpus(episodes=40) == before
        assert "quiet" not in env_prompt_texts()
    finally:
        del _REGISTRY["quiet"]


def test_models_keeps_no_copy_of_an_environment_prompt():
    source = (Path(__file__).resolve().parent.parent / "evoharness_rl" / "models.py").read_text()
    for name in env_names():
        spec = env_spec(name)
        for prompt in (spec.system_prompts.values() if spec else ()):
            first_line = prompt.splitlines()[0]
            assert first_line[:60] not in source, f"models.py repeats {name}'s system prompt"
