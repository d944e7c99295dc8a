"""Generation backends behind one narrow interface (see base.py), and the token helpers they share.

    backend = make_backend(cfg)                    # or make_backend(cfg.policy, cfg.model, ...)
    ids = encode_prompt(backend.tokenizer, messages)
    [completion] = backend.generate([GenerationRequest(messages, prompt_ids=ids)], sampling)

| policy.backend | class                     | input           | weight sync                          |
|----------------|---------------------------|-----------------|--------------------------------------|
| hf             | hf.HFBackend              | token ids       | shares the training model object     |
| vllm           | vllm.VLLMBackend          | token ids       | in-place reload, or a LoRA adapter   |
| vllm_server    | vllm.VLLMServerBackend    | token ids       | LoRA adapter via /v1/load_lora_adapter |
| openai         | openai.OpenAIBackend      | chat messages   | -                                    |
| scripted       | scripted.ScriptedBackend  | the env expert  | -                                    |
| replay         | replay.ReplayBackend      | a JSON list     | -                                    |

Backend modules are imported lazily: `import evoharness_rl.engines` stays cheap.
"""

from __future__ import annotations

from typing import Any, Optional

from evoharness_rl.engines.base import Completion, GenerationBackend, GenerationRequest, SamplingSettings
from evoharness_rl.engines.tokens import (
    continuation_head_length,
    encode_continuation,
    encode_prompt,
    load_tokenizer,
    stop_token_ids,
    system_head_length,
    truncate_prompt,
)

__all__ = [
    "Completion", "GenerationBackend", "GenerationRequest", "SamplingSettings", "make_backend", "context_tokens",
    "encode_prompt", "encode_continuation", "continuation_head_length", "load_tokenizer", "stop_token_ids",
    "system_head_length", "truncate_prompt",
]


def make_backend(
    policy_cfg: Any,
    model_cfg: Any = None,
    tokenizer: Any = None,
    model: Any = None,
    device: str = "auto",
    seed: int = 0,
) -> GenerationBackend:
    """The backend named by `policy_cfg.backend`.

    `policy_cfg` is a PolicyConfig (with `model_cfg` a ModelConfig), or a whole Config,
    whose policy, model, device and seed are then used. `tokenizer` and `model` reuse
    objects the caller already holds (the hf backend then generates with the training
    model itself).
    """
    context = "per_turn"
    if hasattr(policy_cfg, "policy"):  # a whole Config
        cfg = policy_cfg
        policy_cfg, model_cfg, device, seed, context = cfg.policy, cfg.model, cfg.device, cfg.seed, cfg.env.context
    name = policy_cfg.backend
    if name == "scripted":
        from evoharness_rl.engines.scripted import ScriptedBackend

        return ScriptedBackend()
    if name == "replay":
        from evoharness_rl.engines.replay import ReplayBackend

        if not policy_cfg.path:
            raise ValueError("policy=replay needs policy.path: a JSON file with a list of responses")
        return ReplayBackend(policy_cfg.path)
    if name == "openai":
        from evoharness_rl.engines.openai import OpenAIBackend

        return OpenAIBackend(policy_cfg.base_url, policy_cfg.model_name or _path(model_cfg), policy_cfg.api_key_env,
                             policy_cfg.concurrency, policy_cfg.max_retries, policy_cfg.request_timeout_s)
    if model_cfg is None:
        raise ValueError(f"policy.backend={name} needs a model config (model.path: the checkpoint and its tokenizer)")
    if tokenizer is None:
        tokenizer = load_tokenizer(model_cfg.path, model_cfg.trust_remote_code)
    return _token_backend(name, policy_cfg, model_cfg, tokenizer, model, device, seed, context)


def context_tokens(policy_cfg: Any, context: str) -> int:
    """The longest sequence a model holds at once: a per_turn prompt and its completion, or an accumulated
    conversation (its first prompt and up to `max_trajectory_tokens` more; the rollout engine never goes past)."""
    extra = policy_cfg.max_trajectory_tokens if context == "accumulated" else policy_cfg.max_new_tokens
    return policy_cfg.max_prompt_tokens + extra


def _token_backend(name: str, policy_cfg: Any, model_cfg: Any, tokenizer: Any, model: Any, device: str,
                   seed: int, context: str = "per_turn") -> GenerationBackend:
    if name == "hf":
        from evoharness_rl.engines.hf import HFBackend

        return HFBackend(model if model is not None else model_cfg.path, tokenizer, device, model_cfg.dtype,
                         policy_cfg.batch_size, model_cfg.attn_implementation, model_cfg.trust_remote_code,
                         policy_cfg.prefix_cache_mb)
    if name == "vllm":
        from evoharness_rl.engines.vllm import VLLMBackend, context_length

        p = policy_cfg
        return VLLMBackend(
            model_cfg.path, tokenizer, model_cfg.dtype, seed,
            max_model_len=context_length(model_cfg.path, context_tokens(p, context)),
            gpu_memory_utilization=p.gpu_memory_utilization, tensor_parallel_size=p.tensor_parallel_size,
            enable_lora=p.enable_lora, max_lora_rank=p.max_lora_rank, enforce_eager=p.enforce_eager,
            sleep_between_updates=p.sleep_between_updates, trust_remote_code=model_cfg.trust_remote_code,
        )
    if name == "vllm_server":
        from evoharness_rl.engines.vllm import VLLMServerBackend

        return VLLMServerBackend(policy_cfg.base_url, tokenizer, policy_cfg.model_name, policy_cfg.api_key_env,
                                 policy_cfg.concurrency, policy_cfg.max_retries, policy_cfg.request_timeout_s)
    raise ValueError(f"policy.backend={name!r} is not valid; allowed: hf, vllm, vllm_server, openai, scripted, replay")


def _path(model_cfg: Any) -> Optional[str]:
    return getattr(model_cfg, "path", None) if model_cfg is not None else None
