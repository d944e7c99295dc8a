"""init-model's tokenizer text takes an environment's prompts from the registry, never from a copy in models.py."""

from __future__ import annotations

from pathlib import Path

from evoharness_rl.envs import env_names, env_part, env_spec
from evoharness_rl.models import env_prompt_texts, training_corpus


def test_environments_without_tokenizer_text_give_their_spec_prompts():
    without = [name for name in env_names() if env_part(name, "tokenizer_text") is None and env_spec(name)]
    assert without, "no registered environment relies on its spec (webarena did)"
    corpus = set(training_corpus(episodes=40))
    texts = env_prompt_texts()
    for name in without:
        spec = env_spec(name)
        assert texts[name] == (spec.system_prompts["adaptive"], spec.turn_template)
        assert all(f"system\n{prompt}" in corpus for prompt in spec.system_prompts.values())


def test_models_keeps_no_copy_of_an_environment_prompt():
    source = (Path(__file__).resolve().parent.parent / "evoharness_rl" / "models.py").read_text()
    for name in env_names():
        spec = env_spec(name)
        for prompt in (spec.system_prompts.values() if spec else ()):
            first_line = prompt.splitlines()[0]
            assert first_line[:60] not in source, f"models.py repeats {name}'s system prompt"
