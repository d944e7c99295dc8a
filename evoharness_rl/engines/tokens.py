"""Chat-template tokenisation for token backends: prompts in, exact ids out.

Token-in, token-out: a completion's ids are never decoded and
re-encoded. An `accumulated` conversation is therefore built as

    sequence = encode_prompt(first messages)
             + completion ids (exactly as generated)
             + encode_continuation(new messages, completion ids)
             + completion ids + ...

`encode_continuation` renders the chat template with a sentinel in place of the
assistant's content and tokenises only the text after it: the template's end-of-turn
marker, the new user message and the generation prompt. If the completion already ended
with that end-of-turn token (it stopped at EOS), the token is not added a second time.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional, Sequence

_SENTINEL = "<<evoharness-completion-sentinel>>"  # stands in for the assistant content while rendering
_PLACEHOLDER_USER = {"role": "user", "content": "."}  # stands in for earlier turns when none are given


def load_tokenizer(path: Optional[str], trust_remote_code: bool = False):
    """The checkpoint's tokenizer; raises ValueError naming `path` when it has no chat template."""
    from evoharness_rl.models import load_tokenizer as _load

    return _load(path, trust_remote_code=trust_remote_code)


def encode_prompt(tokenizer: Any, messages: Sequence[dict[str, str]], **template_kwargs: Any) -> list[int]:
    """Token ids of `messages` rendered by the chat template, ending with the generation prompt."""
    ids = tokenizer.apply_chat_template(
        list(messages), add_generation_prompt=True, tokenize=True, return_dict=False, **template_kwargs
    )
    return list(ids)


def encode_continuation(
    tokenizer: Any,
    new_messages: Sequence[dict[str, str]],
    completion_ids: Optional[Sequence[int]] = None,
    previous_messages: Optional[Sequence[dict[str, str]]] = None,
    **template_kwargs: Any,
) -> list[int]:
    """Ids to append after a completion: the rest of the assistant turn, the new messages, the generation prompt.

    `new_messages` starts with the assistant message whose content the completion ids
    already hold (its text is not used: the ids stay as generated), followed by the new
    environment messages. `completion_ids` (the ids just generated) decides whether the
    template's end-of-turn token is still needed: it is dropped when the completion
    already ends with it. `previous_messages` (the conversation before the assistant
    message) only helps templates whose rendering depends on earlier turns; without it a
    one-message placeholder precedes the assistant message.
    """
    if not new_messages or new_messages[0].get("role") != "assistant":
        raise ValueError(
            "encode_continuation expects new_messages to start with the assistant message whose ids were just "
            f"generated; got roles {[m.get('role') for m in new_messages]}"
        )
    before = list(previous_messages) if previous_messages else [_PLACEHOLDER_USER]
    conversation = before + [{"role": "assistant", "content": _SENTINEL}] + list(new_messages[1:])
    text = tokenizer.apply_chat_template(conversation, add_generation_prompt=True, tokenize=False, **template_kwargs)
    if text.count(_SENTINEL) != 1:
        raise ValueError(
            "the chat template did not render the assistant content verbatim once, so the text after the "
            f"completion cannot be located (template of {getattr(tokenizer, 'name_or_path', 'this tokenizer')})"
        )
    suffix = tokenizer.encode(text.split(_SENTINEL, 1)[1], add_special_tokens=False)
    if completion_ids and suffix and suffix[0] == completion_ids[-1] and suffix[0] in set(tokenizer.all_special_ids):
        suffix = suffix[1:]  # the completion stopped at the end-of-turn token: don't close the turn twice
    return list(suffix)


_PROBE_THINK = "<think>\nprobe reasoning\n</think>\n\n"  # reasoning as Qwen3 writes it (its template re-renders it so)
_PROBE_TURNS = [{"role": "system", "content": "probe system"}, {"role": "user", "content": "probe question 1"},
                {"role": "assistant", "content": _PROBE_THINK + "<action>probe action</action>"},
                {"role": "user", "content": "probe question 2"}]


def prefix_stability_problem(tokenizer: Any, **template_kwargs: Any) -> Optional[str]:
    """Why the chat template is not prefix-stable across turns (one line), or None when it is.

    An `accumulated` conversation is built by appending to the ids already sampled
    (module docstring): the policy sees each earlier turn exactly as it was generated.
    The template is prefix-stable when it renders the same conversation the same way:
    the prompt of turn 1, then the assistant's message verbatim, then the next turn.
    Templates that rewrite earlier turns once a later one exists (Qwen3 drops the
    `<think>` block of every assistant message before the last user message; some add a
    marker to the generation prompt that history omits) are not: an accumulated
    conversation then differs from the template's rendering of it (SFT data, a chat
    server), which is what the policy was or will be trained and served on.
    """
    def render(messages: list[dict[str, str]], generation_prompt: bool = True) -> str:
        return tokenizer.apply_chat_template(messages, add_generation_prompt=generation_prompt, tokenize=False,
                                             **template_kwargs)

    try:
        first, full = render(_PROBE_TURNS[:2]), render(_PROBE_TURNS)
    except Exception as exc:  # noqa: BLE001 - a template that cannot render a plain conversation says so itself
        return f"the chat template cannot render a two-turn conversation ({type(exc).__name__}: {exc})"
    name = getattr(tokenizer, "name_or_path", "") or "this tokenizer"
    answer = _PROBE_TURNS[2]["content"]
    if full.startswith(first) and full[len(first):].startswith(answer):
        return None
    opening = render(_PROBE_TURNS[:2], generation_prompt=False)
    if not full.startswith(opening):
        problem = "rendering a later turn changes the text of the earlier ones"
    elif not full.startswith(first):
        problem = (f"its generation prompt {first[len(opening):]!r} is not how it renders the start of an earlier "
                   "assistant message")
    elif "probe reasoning" not in full and "<action>probe action</action>" in full:
        problem = "it drops the <think> block of an earlier assistant message (as Qwen3's template does)"
    else:
        problem = "it does not render an earlier assistant message verbatim"
    return (f"the chat template of {name} is not prefix-stable across turns: {problem}, so env.context=accumulated "
            "conditions the policy on a conversation the template would render differently; use env.context=per_turn "
            "or a template that keeps earlier turns as generated")


def continuation_head_length(
    tokenizer: Any,
    new_messages: Sequence[dict[str, str]],
    completion_ids: Optional[Sequence[int]] = None,
    previous_messages: Optional[Sequence[dict[str, str]]] = None,
    **template_kwargs: Any,
) -> int:
    """Tokens of an `encode_continuation` before the new messages' content (end of turn, the user header):
    the `keep_head` with which `truncate_prompt` cuts a continuation that is too long."""
    full = encode_continuation(tokenizer, new_messages, completion_ids, previous_messages, **template_kwargs)
    blank = [new_messages[0]] + [{**m, "content": ""} for m in new_messages[1:]]
    empty = encode_continuation(tokenizer, blank, completion_ids, previous_messages, **template_kwargs)
    n = 0
    while n < min(len(full), len(empty)) and full[n] == empty[n]:
        n += 1
    return n


def system_head_length(tokenizer: Any, messages: Sequence[dict[str, str]], **template_kwargs: Any) -> int:
    """Tokens that render the leading system message(s): the `keep_head` of `truncate_prompt`."""
    head = []
    for message in messages:
        if message.get("role") != "system":
            break
        head.append(message)
    if not head:
        return 0
    ids = tokenizer.apply_chat_template(head, tokenize=True, return_dict=False, **template_kwargs)
    return len(ids)


def truncate_prompt(ids: Sequence[int], max_tokens: int, keep_head: int = 0) -> tuple[list[int], bool]:
    """Apply the prompt-length rule of engines.base; returns (ids, truncated).

    A prompt longer than `max_tokens` keeps its first `keep_head` tokens (the system
    message, see `system_head_length`) and its most recent `max_tokens - keep_head`
    tokens; the middle is dropped. With `keep_head=0` it keeps the most recent tokens.
    """
    ids = list(ids)
    if len(ids) <= max_tokens:
        return ids, False
    if not 0 <= keep_head < max_tokens:
        raise ValueError(
            f"keep_head={keep_head} must be >= 0 and below max_prompt_tokens={max_tokens}: the kept system message "
            "alone would fill the prompt; raise policy.max_prompt_tokens or shorten the system prompt"
        )
    return ids[:keep_head] + ids[len(ids) - (max_tokens - keep_head) :], True


def stop_token_ids(tokenizer: Any, generation_config: Any = None) -> list[int]:
    """End-of-generation ids: the tokenizer's EOS, the ChatML end-of-turn and the model's eos ids."""
    ids: list[int] = []
    candidates: list[Any] = [tokenizer.eos_token_id]
    im_end = tokenizer.convert_tokens_to_ids("<|im_end|>") if "<|im_end|>" in tokenizer.get_vocab() else None
    candidates.append(im_end)
    eos = getattr(generation_config, "eos_token_id", None)
    candidates.extend(eos if isinstance(eos, (list, tuple)) else [eos])
    for token_id in candidates:
        if token_id is not None and token_id not in ids:
            ids.append(int(token_id))
    if not ids:
        raise ValueError(
            f"no end-of-sequence token found for {getattr(tokenizer, 'name_or_path', 'the tokenizer')}; "
            "set eos_token in the tokenizer or eos_token_id in generation_config.json"
        )
    return ids


def checkpoint_generation_config(path: Any) -> Any:
    """The checkpoint's `generation_config.json` (its eos ids), or None when it has none."""
    from transformers import GenerationConfig

    if not path or not (Path(path) / "generation_config.json").is_file():
        return None
    return GenerationConfig.from_pretrained(path)
