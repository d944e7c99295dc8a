"""Chat-template tokenisation: prompts, accumulated continuations (ids never re-tokenised), truncation."""

from __future__ import annotations

import pytest

from evoharness_rl.engines import (
    continuation_head_length,
    encode_continuation,
    encode_prompt,
    load_tokenizer,
    stop_token_ids,
    system_head_length,
    truncate_prompt,
)

SYSTEM = {"role": "system", "content": "You act in a house."}
USER = {"role": "user", "content": "You see a shelf 1."}


def test_encode_prompt_ends_with_generation_prompt(tokenizer):
    ids = encode_prompt(tokenizer, [SYSTEM, USER])
    text = tokenizer.decode(ids)
    assert text == "<|im_start|>system\nYou act in a house.<|im_end|>\n<|im_start|>user\nYou see a shelf 1.<|im_end|>\n<|im_start|>assistant\n"
    assert all(isinstance(i, int) for i in ids)


def test_continuation_after_eos_matches_full_conversation(tokenizer):
    """With a canonical completion, prompt + completion + continuation == the whole conversation encoded at once."""
    response = "go to shelf 1"
    completion = tokenizer.encode(response, add_special_tokens=False) + [tokenizer.eos_token_id]
    prompt = encode_prompt(tokenizer, [SYSTEM, USER])
    new = [{"role": "assistant", "content": response}, {"role": "user", "content": "You arrive at shelf 1."}]
    sequence = prompt + completion + encode_continuation(tokenizer, new, completion_ids=completion)
    assert sequence == encode_prompt(tokenizer, [SYSTEM, USER] + new)


def test_continuation_keeps_generated_ids_verbatim(tokenizer):
    """Ids whose text would re-tokenise differently (here: one byte per token) stay exactly as generated."""
    response = "go to shelf 1"
    completion = [tokenizer.convert_tokens_to_ids(t) for t in tokenizer.tokenize(response)]
    completion = [tokenizer.convert_tokens_to_ids(ch) for ch in "go"] + completion[1:] + [tokenizer.eos_token_id]
    assert completion[:-1] != tokenizer.encode(response, add_special_tokens=False)  # not the canonical encoding
    new = [{"role": "assistant", "content": tokenizer.decode(completion, skip_special_tokens=True)}, USER]
    suffix = encode_continuation(tokenizer, new, completion_ids=completion)
    prompt = encode_prompt(tokenizer, [SYSTEM, USER])
    sequence = prompt + completion + suffix
    assert sequence[len(prompt) : len(prompt) + len(completion)] == completion
    assert tokenizer.decode(suffix) == "\n<|im_start|>user\nYou see a shelf 1.<|im_end|>\n<|im_start|>assistant\n"


def test_continuation_closes_a_truncated_turn(tokenizer):
    """A completion cut by max_new_tokens has no end-of-turn token: the continuation adds it (once)."""
    completion = tokenizer.encode("go to", add_special_tokens=False)
    new = [{"role": "assistant", "content": "go to"}, USER]
    suffix = encode_continuation(tokenizer, new, completion_ids=completion)
    assert suffix[0] == tokenizer.eos_token_id
    assert encode_continuation(tokenizer, new, completion_ids=completion + [tokenizer.eos_token_id]) == suffix[1:]


def test_continuation_same_with_or_without_previous_messages(tokenizer):
    new = [{"role": "assistant", "content": "look"}, USER]
    assert encode_continuation(tokenizer, new, [5, 2], previous_messages=[SYSTEM, USER]) == encode_continuation(
        tokenizer, new, [5, 2]
    )


def test_continuation_requires_the_assistant_message_first(tokenizer):
    with pytest.raises(ValueError, match="start with the assistant message"):
        encode_continuation(tokenizer, [USER])


def test_truncate_prompt_keeps_head_and_recent_tokens():
    ids = list(range(20))
    assert truncate_prompt(ids, 20, keep_head=4) == (ids, False)
    kept, truncated = truncate_prompt(ids, 10, keep_head=4)
    assert truncated and kept == [0, 1, 2, 3, 14, 15, 16, 17, 18, 19]
    assert truncate_prompt(ids, 5) == ([15, 16, 17, 18, 19], True)
    with pytest.raises(ValueError, match="keep_head=10"):
        truncate_prompt(ids, 10, keep_head=10)


def test_system_head_length_is_the_rendered_system_message(tokenizer):
    n = system_head_length(tokenizer, [SYSTEM, USER])
    ids = encode_prompt(tokenizer, [SYSTEM, USER])
    assert tokenizer.decode(ids[:n]) == "<|im_start|>system\nYou act in a house.<|im_end|>\n"
    assert system_head_length(tokenizer, [USER]) == 0


def test_continuation_head_length_is_the_turn_header(tokenizer):
    """What a cut continuation keeps in front: the end of the assistant turn and the new user header."""
    completion = tokenizer.encode("go to", add_special_tokens=False)
    new = [{"role": "assistant", "content": "go to"}, USER]
    ids = encode_continuation(tokenizer, new, completion_ids=completion)
    n = continuation_head_length(tokenizer, new, completion_ids=completion)
    assert tokenizer.decode(ids[:n]) == "<|im_end|>\n<|im_start|>user\n"


def test_load_tokenizer_without_chat_template_names_the_path(tokenizer, tmp_path):
    bare = tmp_path / "no-template"
    tokenizer.save_pretrained(bare)
    (bare / "chat_template.jinja").unlink(missing_ok=True)
    import json

    config_path = bare / "tokenizer_config.json"
    config = json.loads(config_path.read_text())
    config.pop("chat_template", None)
    config_path.write_text(json.dumps(config))
    with pytest.raises(ValueError, match=f"{bare}.*no chat template"):
        load_tokenizer(str(bare))


def test_stop_token_ids_include_end_of_turn(tokenizer):
    from transformers import GenerationConfig

    ids = stop_token_ids(tokenizer, GenerationConfig(eos_token_id=[tokenizer.eos_token_id, 0]))
    assert ids == [tokenizer.eos_token_id, 0]
