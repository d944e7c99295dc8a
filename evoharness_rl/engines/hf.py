"""`hf` backend: transformers `generate`, batched with left padding and a KV cache.

Sampling logprobs. Each returned logprob is log p(token) under the distribution the
token was actually sampled from: the model's logits divided by the temperature, then
restricted to the top-p nucleus and renormalised (vLLM's `processed_logprobs`, which the
`vllm` backends use too). With temperature 0 (greedy) it is the plain log-softmax of the
logits. With top_p = 1 this equals `log_softmax(logits / T)`, which a trainer can
recompute from a teacher-forced forward pass; with top_p < 1 the nucleus
renormalisation makes the two differ by design.

How: `generate` runs greedy over our own logits processors: the temperature and top-p
warpers, `_SampledLogprobs` (which sees exactly the scores sampled from), then
`_SeededSampler`, which draws each row's token from that row's own generator (seeded by
`GenerationRequest.seed`, else the next number of the backend's stream) and leaves only
that token possible. A request's sample therefore depends on its seed and its scores,
never on which requests shared its batch (the pipelined rollout engine batches whatever
is ready), and the global torch generator is never touched. The model's own `generation_config` (checkpoints often
ship top_k/top_p/temperature defaults) is set aside during the call so it cannot leak in.
"""

from __future__ import annotations

import contextlib
import os
from typing import Any, Optional

import torch
from transformers import GenerationConfig, LogitsProcessor, LogitsProcessorList
from transformers.generation import TemperatureLogitsWarper, TopPLogitsWarper

from evoharness_rl.engines.base import Completion, GenerationBackend, GenerationRequest, SamplingSettings, SamplingStream
from evoharness_rl.engines.tokens import stop_token_ids
from evoharness_rl.engines.weights import named_weights, weight_names


class _SampledLogprobs(LogitsProcessor):
    """Records the log-probability of each sampled token under the processed scores.

    Called once per generation step with the running ids; the token sampled at the
    previous step is `input_ids[:, -1]`, so only one step's [B, V] log-softmax is kept.
    """

    def __init__(self, prompt_length: int):
        self.prompt_length = prompt_length
        self.steps: list[torch.Tensor] = []  # one [B] tensor per generated token
        self._last: Optional[torch.Tensor] = None  # [B, V] log-softmax of the previous step

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        if input_ids.shape[1] > self.prompt_length:
            self._gather(input_ids[:, -1])
        self._last = torch.log_softmax(scores.float(), dim=-1)
        return scores

    def finish(self, sequences: torch.Tensor) -> torch.Tensor:
        """[B, new_tokens] logprobs, once `generate` returned `sequences`."""
        if sequences.shape[1] > self.prompt_length:
            self._gather(sequences[:, -1])
        if not self.steps:
            return torch.zeros(sequences.shape[0], 0)
        return torch.stack(self.steps, dim=1).cpu()

    def _gather(self, tokens: torch.Tensor) -> None:
        assert self._last is not None
        self.steps.append(self._last.gather(1, tokens[:, None].to(self._last.device))[:, 0])


class _SeededSampler(LogitsProcessor):
    """Samples each row from its own seeded generator and masks every other token (generate then picks it).
    Rows without a generator (greedy requests) take their most probable token."""

    def __init__(self, seeds: list[Optional[int]], device: Any):
        self.generators = [None if seed is None else torch.Generator(device=device).manual_seed(seed) for seed in seeds]

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        probs = torch.softmax(scores.float(), dim=-1)  # [B, V]
        picked = torch.cat([probs[row].argmax(-1, keepdim=True) if g is None else
                            torch.multinomial(probs[row], 1, generator=g) for row, g in enumerate(self.generators)])
        forced = torch.full_like(scores, float("-inf"))
        return forced.scatter_(1, picked[:, None], 0.0)  # [B, V]: only the sampled token is possible


class HFBackend(GenerationBackend):
    """transformers `generate` over prompt token ids; exact completion ids and sampling logprobs."""

    def __init__(
        self,
        model_or_path: Any,
        tokenizer: Any,
        device: str = "auto",
        dtype: str = "auto",
        batch_size: int = 8,
        attn_implementation: str = "sdpa",
        trust_remote_code: bool = False,
    ):
        """`model_or_path`: a checkpoint directory, or a loaded model (e.g. the training model itself,
        which is then shared: `update_weights(model)` with the same object costs nothing)."""
        if isinstance(model_or_path, (str, os.PathLike)):
            model_or_path = _load(str(model_or_path), device, dtype, attn_implementation, trust_remote_code)
        self.model = model_or_path
        self.tokenizer = tokenizer
        self.batch_size = batch_size
        self.stop_ids = stop_token_ids(tokenizer, getattr(self.model, "generation_config", None))
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else self.stop_ids[0]
        self._load_args = (device, dtype, attn_implementation, trust_remote_code)
        self._stream = SamplingStream()

    # -- generation ---------------------------------------------------------------------

    def generate(self, requests: list[GenerationRequest], sampling: SamplingSettings) -> list[Completion]:
        for i, request in enumerate(requests):
            if not request.prompt_ids:
                raise ValueError(f"request {i} (key {request.key!r}) has no prompt_ids; the hf backend needs token ids")
        # Each request's own seed (base.py), drawn in request order before any batching.
        seeds = [r.seed if r.seed is not None else self._stream.next_seed(sampling.seed) for r in requests]
        # Similar lengths share a batch (less padding); results go back in request order.
        order = sorted(range(len(requests)), key=lambda i: len(requests[i].prompt_ids))
        results: list[Optional[Completion]] = [None] * len(requests)
        with _eval_mode(self.model), _neutral_generation_config(self.model):
            for start in range(0, len(order), self.batch_size):
                chunk = order[start : start + self.batch_size]
                outputs = self._generate_batch([requests[i].prompt_ids for i in chunk], sampling,
                                               [None if requests[i].greedy else seeds[i] for i in chunk])
                for i, completion in zip(chunk, outputs):
                    results[i] = completion
        return results  # type: ignore[return-value]

    def _generate_batch(self, prompts: list[list[int]], sampling: SamplingSettings,
                        seeds: list[Optional[int]]) -> list[Completion]:
        """`seeds`: each row's sampling seed, None for a greedy request (its logprob is still the token's under
        the call's temperature and top-p, as the trainer scores it)."""
        device = next(self.model.parameters()).device
        input_ids, attention_mask = _left_pad(prompts, self.pad_id, device)
        recorder = _SampledLogprobs(input_ids.shape[1])
        greedy = sampling.temperature == 0
        processors = LogitsProcessorList()
        if not greedy and sampling.temperature != 1.0:
            processors.append(TemperatureLogitsWarper(sampling.temperature))
        if not greedy and sampling.top_p < 1.0:
            processors.append(TopPLogitsWarper(sampling.top_p))
        processors.append(recorder)
        if not greedy:
            processors.append(_SeededSampler(seeds, device))  # the sampling is ours: generate runs greedy
        config = GenerationConfig(
            do_sample=False, max_new_tokens=sampling.max_new_tokens, eos_token_id=self.stop_ids,
            pad_token_id=self.pad_id, use_cache=True,
        )
        sequences = self.model.generate(
            input_ids=input_ids, attention_mask=attention_mask, generation_config=config, logits_processor=processors,
        )
        logprobs = recorder.finish(sequences)
        new_ids = sequences[:, input_ids.shape[1] :].cpu()
        return [self._completion(new_ids[row].tolist(), logprobs[row].tolist()) for row in range(len(prompts))]

    def _completion(self, ids: list[int], logprobs: list[float]) -> Completion:
        """Cut at the first stop token (kept: the model learns to stop); the rest is padding."""
        finish = "length"
        for position, token in enumerate(ids):
            if token in self.stop_ids:
                ids, logprobs, finish = ids[: position + 1], logprobs[: position + 1], "stop"
                break
        text = self.tokenizer.decode(ids, skip_special_tokens=True)
        return Completion(text=text, completion_ids=ids, logprobs=logprobs, finish_reason=finish)

    # -- weights -----------------------------------------------------------------------

    def update_weights(self, model: Any) -> None:
        """Take the trainer's weights: nothing to do for the shared model object; otherwise
        copy parameters from another model (PEFT adapters merged) or reload a checkpoint directory."""
        if model is self.model:
            return
        if isinstance(model, (str, os.PathLike)):
            self.model = _load(str(model), *self._load_args)
            return
        params = dict(self.model.named_parameters())
        names = weight_names(model)
        missing, unexpected = sorted(params.keys() - set(names)), sorted(set(names) - params.keys())
        if missing or unexpected:
            raise ValueError(
                f"update_weights: the given model does not match the backend's ({len(missing)} missing, e.g. "
                f"{missing[:3]}; {len(unexpected)} unexpected, e.g. {unexpected[:3]}); pass the same architecture"
            )
        with torch.no_grad():
            for name, tensor in named_weights(model):
                params[name].copy_(tensor)

    def release(self) -> None:
        self.model = None
        if torch.cuda.is_available():
            torch.cuda.empty_cache()


def _load(path: str, device: str, dtype: str, attn_implementation: str, trust_remote_code: bool):
    from types import SimpleNamespace

    from evoharness_rl.models import load_model

    cfg = SimpleNamespace(path=path, dtype=dtype, attn_implementation=attn_implementation,
                          trust_remote_code=trust_remote_code)
    return load_model(cfg, device=device).eval()


def _left_pad(prompts: list[list[int]], pad_id: int, device: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """[B, L] ids and attention mask, padded on the left so every prompt ends at the same column."""
    length = max(len(p) for p in prompts)
    ids = torch.full((len(prompts), length), pad_id, dtype=torch.long)
    mask = torch.zeros((len(prompts), length), dtype=torch.long)
    for row, prompt in enumerate(prompts):
        ids[row, length - len(prompt) :] = torch.tensor(prompt, dtype=torch.long)
        mask[row, length - len(prompt) :] = 1
    return ids.to(device), mask.to(device)


@contextlib.contextmanager
def _eval_mode(model: Any):
    """Generate without dropout, then restore the training model's mode."""
    was_training = model.training
    model.eval()
    try:
        yield
    finally:
        model.train(was_training)


@contextlib.contextmanager
def _neutral_generation_config(model: Any):
    """Hide the checkpoint's generation defaults (top_k, top_p, penalties...) during our call."""
    target = model.get_base_model() if hasattr(model, "get_base_model") else model  # PEFT: the wrapped model
    saved = target.generation_config
    target.generation_config = GenerationConfig()
    try:
        yield
    finally:
        target.generation_config = saved
