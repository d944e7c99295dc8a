"""The one narrow interface every generation backend implements.

    backend.generate(requests, sampling) -> list[Completion]   # one batch, same order
    backend.update_weights(model)                               # after an optimizer step
    backend.release()                                           # free memory / processes

Token backends (`hf`, `vllm`, `vllm_server`) receive prompt token ids and return the
exact completion ids with one sampling logprob per id (token-in, token-out: nothing is
re-tokenised). The logprob is that of the distribution the token was sampled from:
logits / temperature, top-p nucleus renormalised (vLLM's `processed_logprobs`); greedy:
plain log-softmax. A completion that stopped keeps its end-of-turn token. Text backends
(`openai`, `scripted`, `replay`) receive chat messages and return text only (empty
id/logprob lists).

Prompt truncation rule (token backends): a prompt longer than `max_prompt_tokens` keeps
its first `keep_head` tokens (the system message) and the most recent tokens, dropping
the middle; the request is flagged `prompt_truncated` and counted by the engine
(`engines.truncate_prompt`; `engines.system_head_length` gives `keep_head`). In
accumulated context the rule applies to what each turn adds, never to the conversation
already sampled (rollout/engine.py: the trainer scores completions in that context).

Sampling randomness: never repeats, always reproducible. A backend owns one random
stream, seeded from `SamplingSettings.seed` the first time it sees that seed, that
advances with every `generate` call: two successive calls with identical requests
sample differently, and two backends built alike give identical samples for the same
sequence of calls. Every token backend samples each request from its own seed,
`GenerationRequest.seed` when the caller set one (the rollout engine derives it from the
run seed, task, sample and turn, so a sample does not depend on how or when requests were
batched) or else the next number of the stream, drawn in request order.

Streaming (`StreamingBackend`: hf and the offline vLLM engine): besides `generate`, the backend
keeps a request queue that the pipelined rollout engine feeds one request at a time as
episodes become ready -- `submit(request, sampling)`, then `poll()` runs one scheduling
step and returns the requests that finished, as (request key, Completion) pairs.
"""

from __future__ import annotations

import abc
import random
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Optional


@dataclass
class SamplingSettings:
    temperature: float = 1.0  # 0 means greedy
    top_p: float = 1.0
    max_new_tokens: int = 512
    seed: Optional[int] = None  # seeds the backend's random stream (see "Sampling randomness" above)

    def of(self, request: "GenerationRequest") -> "SamplingSettings":
        """The settings `request` decodes with: the call's, at temperature 0 for a greedy request."""
        return replace(self, temperature=0.0) if request.greedy else self


@dataclass
class GenerationRequest:
    """One prompt. Token backends read `prompt_ids`; text backends read `messages`."""

    messages: list[dict[str, str]]
    prompt_ids: list[int] = field(default_factory=list)
    key: str = ""  # episode key (replay/scripted use it to find their episode's state)
    seed: Optional[int] = None  # this request's own sampling seed (vllm backends; None: drawn from the stream)
    greedy: bool = False  # decode this request greedily whatever the call's temperature (grpo.greedy_samples)
    teacher: Optional[Callable[[], str]] = None  # scripted: returns the expert's next response
    prompt_truncated: bool = False


@dataclass
class Completion:
    text: str
    completion_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    finish_reason: str = "stop"  # stop | length | error
    error: Optional[str] = None  # set when the backend failed for this request after retries


def derive_seed(*parts: int) -> int:
    """A seed that depends on every part (e.g. run seed, update, task, sample, turn); stable across runs."""
    value = 0
    for part in parts:
        value = (value * 1_000_003 + int(part)) % (2**31 - 1)
    return value


class SamplingStream:
    """A backend's random stream: seeded the first time a `SamplingSettings.seed` is seen, advanced by every draw.

    A new seed (GRPO seeds each update) restarts the stream from it, so a resumed run
    repeats exactly; seed None starts from fresh OS entropy.
    """

    def __init__(self) -> None:
        self.seed: Optional[int] = None
        self._rng: Optional[random.Random] = None

    def next_seed(self, seed: Optional[int]) -> int:
        """The next number of the stream for settings seeded with `seed`."""
        if self._rng is None or seed != self.seed:
            self.seed, self._rng = seed, random.Random(seed)
        return self._rng.getrandbits(62)


class GenerationBackend(abc.ABC):
    """Base class of generation backends."""

    uses_tokens: bool = True  # token backends need prompt_ids; text backends need messages
    streams: bool = False  # has a request queue (submit/poll): the pipelined engine batches continuously

    @property
    def micro_batch(self) -> Optional[int]:
        """Most requests the pipelined engine sends in one `generate` call (None: all that are ready)."""
        return getattr(self, "batch_size", None)

    @abc.abstractmethod
    def generate(self, requests: list[GenerationRequest], sampling: SamplingSettings) -> list[Completion]:
        """Generate one completion per request, in order."""

    def update_weights(self, model: Any) -> None:
        """Load the trainer's current weights (no-op for backends without a model)."""

    def reset_prefix_cache(self) -> None:
        """Forget cached prompt prefixes, so the next requests start cold (a benchmark's runs); no-op without one."""

    def release(self) -> None:
        """Free GPU memory, processes and connections; safe to call twice."""


class StreamingBackend(GenerationBackend):
    """A backend with a request queue (module docstring, "Streaming"); `streams` says whether it is usable now."""

    streams: bool = True

    @abc.abstractmethod
    def submit(self, request: GenerationRequest, sampling: SamplingSettings) -> None:
        """Queue one request (its key must be unique among those not yet polled)."""

    @abc.abstractmethod
    def poll(self) -> list[tuple[str, Completion]]:
        """One scheduling step; the (key, completion) of every request that finished."""
