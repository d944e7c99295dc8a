"""`hf` backend: our own batched decode loop over a transformers model, with a KV cache and continuous batching.

Sampling logprobs. Each returned logprob is log p(token) under the distribution the
token was actually sampled from: the model's logits divided by the temperature, then
restricted to the top-p nucleus and renormalised (vLLM's `processed_logprobs`, which the
`vllm` backends use too). With temperature 0 (greedy) it is the plain log-softmax of the
logits. With top_p = 1 this equals `log_softmax(logits / T)`, which a trainer can
recompute from a teacher-forced forward pass; with top_p < 1 the nucleus
renormalisation makes the two differ by design.

How: one decode loop (`_Decoder`) serves both `generate` and the request queue
(`submit`/`poll`, which the pipelined rollout engine feeds as episodes become ready, so
a request joins the running batch mid-generation instead of waiting for the next call;
a step costs far less per row in a larger batch: 16 rows took 1.5x the time of 4 on the
demo's 0.84M model). Each step
applies transformers' temperature and top-p warpers to the last position's logits, records
the sampled token's log-softmax under them, and draws each row's token from that row's
own generator (seeded by `GenerationRequest.seed`, else the next number of the backend's
stream; greedy rows take the argmax). A request's sample therefore depends on its seed
and its scores, never on which requests shared its batch, and the global torch generator
is never touched. The model's own `generation_config` (checkpoints often ship
top_k/top_p/temperature defaults) plays no part: the loop calls the model's forward only.
Rows are left padded with explicit position ids; batch composition changes a row's
logits only by float rounding (the tests compare with single-prompt decoding).

Prompt prefixes (`_PrefixStore`, vLLM's automatic prefix caching at whole-prompt grain). Every
prefilled prompt's keys and values are kept, within `prefix_cache_mb`, and a new prompt that
starts with tokens of one of them prefills only the rest, its cache row being the stored keys
and values, then padding, then its own tokens (positions are explicit and padding is masked, so
the gap changes nothing but rounding). Rollout prompts share most of their tokens: in one
update of the ALFWorld demo, 96% of the prompt tokens (the system prompt, the task, a group's
identical first turns) began an earlier prompt. The store is emptied when any parameter changes
in place (torch's version counters: an optimizer step, `update_weights`), as vLLM resets its
prefix cache on a weight update.

Grouped-query attention on CPU (`_sdpa_gqa`). With a mask, which every decode step has,
transformers' sdpa attention copies each key/value head once per query head sharing it before
calling torch's sdpa; on CPU that copy of the whole cache cost more than the attention itself
(32 rows of 650 tokens: 3.4 ms against 0.9 with sdpa's own `enable_gqa`, the same numbers).
The decode loop runs an sdpa model on CPU through `_sdpa_gqa` instead, which lets torch group the
heads; training forwards and other devices keep transformers' path.

The decode step of Llama-style models (`_LeanStep`: llama, qwen2, qwen3 with sdpa and full attention).
A step feeds one token a row, and on a small model a good part of transformers' forward is
bookkeeping (config lookups, mask building, cache dispatch, output records), not arithmetic.
`_LeanStep` runs the same modules (so LoRA layers and the model's own rotary embedding take part) in
the same order with the same torch calls, and skips the rest: on CPU the logits are the same to the
bit (a test compares them). On the demo's model the forward took 24-37% less (1 to 16 rows), a whole
decode step with its sampling 10-19% less at 1 to 6 rows (one run each, CPU, one thread). Prefill
and every other model keep transformers' forward.
"""

from __future__ import annotations

import contextlib
import inspect
import os
from collections import OrderedDict, deque
from dataclasses import dataclass, field
from typing import Any, Optional

import torch
from transformers import AttentionInterface
from transformers.cache_utils import DynamicCache, DynamicLayer
from transformers.generation import TemperatureLogitsWarper, TopPLogitsWarper
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask
from transformers.models.llama.modeling_llama import rotate_half  # the same in qwen2 and qwen3

from evoharness_rl.engines.base import (Completion, GenerationRequest, SamplingSettings, SamplingStream,
                                        StreamingBackend)
from evoharness_rl.engines.tokens import stop_token_ids
from evoharness_rl.engines.weights import named_weights, weight_names


_SDPA_GQA = "evoharness_sdpa_gqa"


def _sdpa_gqa(module: Any, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
              attention_mask: Optional[torch.Tensor], dropout: float = 0.0, scaling: Optional[float] = None,
              is_causal: Optional[bool] = None, **kwargs: Any) -> tuple[torch.Tensor, None]:
    """transformers' sdpa attention with the query heads grouped over shared key/value heads by torch
    (module docstring, "Grouped-query attention on CPU")."""
    causal = (module.is_causal if is_causal is None else is_causal) and attention_mask is None and query.shape[2] > 1
    out = torch.nn.functional.scaled_dot_product_attention(
        query, key, value, attn_mask=attention_mask, dropout_p=dropout, scale=scaling, is_causal=causal,
        enable_gqa=query.shape[1] != key.shape[1])
    return out.transpose(1, 2).contiguous(), None


AttentionInterface.register(_SDPA_GQA, _sdpa_gqa)
AttentionMaskInterface.register(_SDPA_GQA, sdpa_mask)


@contextlib.contextmanager
def _grouped_attention(model: Any, device: torch.device):
    """Run `model`'s forwards (on `device`) through `_sdpa_gqa` if it uses sdpa on CPU; restore its setting after."""
    config = model.config
    if config._attn_implementation != "sdpa" or device.type != "cpu":
        yield
        return
    config._attn_implementation = _SDPA_GQA
    try:
        yield
    finally:
        config._attn_implementation = "sdpa"


class _LeanStep:
    """One decode step of a Llama-style model without transformers' forward (module docstring,
    "The decode step of Llama-style models"): `__call__` returns the last position's logits and
    appends each layer's new keys and values to the plain cache, as the model's forward would."""

    FAMILIES = ("llama", "qwen2", "qwen3")

    @classmethod
    def of(cls, model: Any) -> Optional["_LeanStep"]:
        """The lean step for `model` (a PEFT wrapper included), or None where transformers' forward must run."""
        base = model.get_base_model() if hasattr(model, "get_base_model") else model
        config = getattr(base, "config", None)
        inner = getattr(base, "model", None)
        if (config is None or config.model_type not in cls.FAMILIES or config._attn_implementation != "sdpa"
                or any(kind != "full_attention" for kind in getattr(config, "layer_types", None) or [])
                or not hasattr(inner, "layers") or not hasattr(base, "lm_head")):
            return None
        return cls(base)

    def __init__(self, base: Any):
        self.model, self.lm_head = base.model, base.lm_head

    def __call__(self, ids: torch.Tensor, mask: torch.Tensor, positions: torch.Tensor, cache: Any) -> torch.Tensor:
        model, rows = self.model, ids.shape[0]
        x = model.embed_tokens(ids)
        cos, sin = model.rotary_emb(x, positions)
        cos, sin = cos[:, None], sin[:, None]
        allowed = mask.bool()[:, None, None, :]
        for layer, kv in zip(model.layers, cache.layers):
            attention = layer.self_attn
            h = layer.input_layernorm(x)
            shape = (rows, 1, -1, attention.head_dim)
            q, k = attention.q_proj(h).view(shape), attention.k_proj(h).view(shape)
            if hasattr(attention, "q_norm"):  # qwen3 normalises each head
                q, k = attention.q_norm(q), attention.k_norm(k)
            q, k = q.transpose(1, 2), k.transpose(1, 2)
            q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin
            kv.keys = torch.cat([kv.keys, k], dim=2)
            kv.values = torch.cat([kv.values, attention.v_proj(h).view(shape).transpose(1, 2)], dim=2)
            out = torch.nn.functional.scaled_dot_product_attention(
                q, kv.keys, kv.values, attn_mask=allowed, scale=attention.scaling,
                enable_gqa=q.shape[1] != kv.keys.shape[1])
            x = x + attention.o_proj(out.transpose(1, 2).reshape(rows, 1, -1))
            x = x + layer.mlp(layer.post_attention_layernorm(x))
        return self.lm_head(model.norm(x))[:, -1, :]


class _PrefixStore:
    """Keys and values of prompts already prefilled (module docstring, "Prompt prefixes"), least recently used first.

    An entry is one prompt: its token ids and, per layer, keys and values [heads, tokens, head_dim]. `match`
    finds the entry sharing the longest prefix with a prompt by one comparison against all entries."""

    MIN_TOKENS = 16  # a shorter shared prefix is prefilled again: it would save less than the lookup costs

    def __init__(self, budget_bytes: int):
        self.budget = budget_bytes
        self.entries: OrderedDict[int, tuple[torch.Tensor, list[tuple[torch.Tensor, torch.Tensor]], int]] = OrderedDict()
        self.used = 0  # bytes held
        self.version: tuple = ()  # (id, version counter) of each parameter when the entries were computed
        self._next = 0
        self._table: Optional[tuple] = None  # entry keys, their ids padded with -1 [E, T], their lengths [E]

    def check(self, model: Any) -> None:
        """Empty the store if a parameter changed (in place, or was replaced) since its entries were computed."""
        version = tuple((id(p), p._version) for p in model.parameters())
        if version != self.version:
            self.clear()
            self.version = version

    def clear(self) -> None:
        self.entries.clear()
        self.used, self.version, self._table = 0, (), None

    def match(self, prompt: list[int]) -> tuple[int, int]:
        """(entry key, tokens to reuse): the longest prefix `prompt` shares with an entry, leaving its last
        token to prefill (the first sample needs its logits); (-1, 0) below MIN_TOKENS."""
        keys, shared, _ = self._shared(prompt[:-1])
        if not keys:
            return -1, 0
        best = int(shared.argmax())
        if int(shared[best]) < self.MIN_TOKENS:
            return -1, 0
        self.entries.move_to_end(keys[best])
        return keys[best], int(shared[best])

    def kv(self, key: int, length: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
        return [(k[:, :length], v[:, :length]) for k, v in self.entries[key][1]]

    def add(self, prompt: list[int], kv: list[tuple[torch.Tensor, torch.Tensor]]) -> None:
        """Keep `prompt`'s keys and values, unless a stored prompt begins with it; a stored prompt that begins
        `prompt` is replaced; the least recently used go while the budget is exceeded."""
        size = sum(k.numel() * k.element_size() + v.numel() * v.element_size() for k, v in kv)
        if size > self.budget:
            return
        keys, shared, lengths = self._shared(prompt)
        if keys and int(shared.max()) == len(prompt):
            return
        for i in (shared == lengths).nonzero()[:, 0].tolist():
            self.used -= self.entries.pop(keys[i])[2]
        while self.entries and self.used + size > self.budget:
            self.used -= self.entries.popitem(last=False)[1][2]
        self.entries[self._next] = (torch.tensor(prompt), kv, size)
        self.used += size
        self._next += 1
        self._table = None

    def _shared(self, prompt: list[int]) -> tuple[list[int], torch.Tensor, torch.Tensor]:
        """The entries' keys, how many leading tokens each shares with `prompt`, and each one's length."""
        if not self.entries:
            return [], torch.zeros(0, dtype=torch.long), torch.zeros(0, dtype=torch.long)
        if self._table is None:
            keys = list(self.entries)
            tokens = [self.entries[k][0] for k in keys]
            self._table = (keys, torch.nn.utils.rnn.pad_sequence(tokens, batch_first=True, padding_value=-1),
                           torch.tensor([len(t) for t in tokens]))
        keys, table, lengths = self._table
        width = min(table.shape[1], len(prompt))
        shared = (table[:, :width] == torch.tensor(prompt[:width], dtype=torch.long)).cumprod(1).sum(1)
        return keys, shared, lengths


@dataclass
class _Row:
    """One request being decoded: what it has generated so far and how it samples."""

    key: str
    prompt: list[int]
    max_new_tokens: int
    generator: Optional[torch.Generator]  # None: greedy (argmax of the processed scores)
    ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)


class _Decoder:
    """Continuous batching over one KV cache (module docstring, "How").

    Invariant between calls: every running row has sampled its latest token, and the cache
    holds every token before it. `step()` prefills the waiting requests that fit (left
    padded among themselves), samples their first token and merges their cache into the
    running one, left padded to a common length; then one cached forward feeds every row's
    latest token and samples the next. Finished rows leave at once, and cache columns that
    only pad leave with them. Positions are explicit, so padding never shifts a row.
    Models whose cache is not plain full attention (sliding-window layers) admit new rows
    only into an empty batch and keep finished rows until it drains, as `model.generate` does.
    """

    def __init__(self, model: Any, stop_ids: list[int], pad_id: int, max_rows: int,
                 prefixes: Optional[_PrefixStore] = None):
        self.model, self.stop_ids, self.pad_id, self.max_rows = model, set(stop_ids), pad_id, max_rows
        self.prefixes = prefixes  # None: every prompt is prefilled whole
        self.waiting: deque[_Row] = deque()
        self.rows: list[_Row] = []
        self.live: list[bool] = []  # per row: still generating (False only for rows kept in a non-plain cache)
        self.cache: Any = None
        self.mask: Optional[torch.Tensor] = None  # [B, T] 1 where the cache holds a real token
        self.sampling: Optional[SamplingSettings] = None  # the call settings every running row shares
        self.joinable = True
        self._trim_logits = "logits_to_keep" in inspect.signature(model.forward).parameters
        self._lean = _LeanStep.of(model)  # None: every decode step runs transformers' forward

    @property
    def busy(self) -> bool:
        return bool(self.waiting or any(self.live))

    def add(self, row: _Row, sampling: SamplingSettings) -> None:
        shared = (sampling.temperature, sampling.top_p)
        if self.sampling is not None and self.busy and (self.sampling.temperature, self.sampling.top_p) != shared:
            raise ValueError(
                f"hf backend: a request at temperature={sampling.temperature}, top_p={sampling.top_p} cannot join "
                f"running requests at temperature={self.sampling.temperature}, top_p={self.sampling.top_p}; "
                "poll them to the end first")
        self.sampling = sampling
        self.waiting.append(row)

    def step(self) -> list[_Row]:
        """One scheduling step (see the class docstring); the rows that finished."""
        device = next(self.model.parameters()).device
        finished: list[_Row] = []
        with torch.no_grad(), _grouped_attention(self.model, device):
            room = self.max_rows - len(self.rows)
            if self.waiting and room > 0 and (self.joinable or not self.rows):
                joining = [self.waiting.popleft() for _ in range(min(room, len(self.waiting)))]
                self._prefill(joining, device)
                finished += self._retire()
            if any(self.live):
                ids = torch.tensor([[row.ids[-1]] for row in self.rows], device=device)
                positions = torch.tensor([[len(row.prompt) + len(row.ids) - 1] for row in self.rows], device=device)
                self.mask = torch.cat([self.mask, self.mask.new_ones((len(self.rows), 1))], dim=1)
                if self._lean is not None and self.joinable:
                    logits = self._lean(ids, self.mask, positions, self.cache)
                else:
                    out = self.model(input_ids=ids, attention_mask=self.mask, position_ids=positions,
                                     past_key_values=self.cache, use_cache=True, **self._logits_args())
                    self.cache, logits = out.past_key_values, out.logits[:, -1, :]
                self._sample(logits, [row if live else None for row, live in zip(self.rows, self.live)])
                finished += self._retire()
        return finished

    def _logits_args(self) -> dict:
        return {"logits_to_keep": 1} if self._trim_logits else {}

    def _prefill(self, joining: list[_Row], device: Any) -> None:
        """Prefill `joining`, sample their first tokens and merge their cache into the running one; rows that reuse
        a stored prefix are prefilled apart from the others (their padding would cost the others' full prompts)."""
        store = self.prefixes if self.joinable else None
        if store is not None:
            store.check(self.model)
        matches = [store.match(row.prompt) if store is not None else (-1, 0) for row in joining]
        for reuse in (False, True):
            cohort = [(row, match) for row, match in zip(joining, matches) if bool(match[1]) == reuse]
            if cohort:
                self._prefill_cohort([row for row, _ in cohort], [match for _, match in cohort], device)

    def _prefill_cohort(self, joining: list[_Row], matches: list[tuple[int, int]], device: Any) -> None:
        """One forward over `joining`'s prompts after their reused prefixes (`matches`: entry key and tokens
        reused, 0 for none): each cache row is [padding, reused prefix, padding, the rest of the prompt]."""
        reused = [n for _, n in matches]
        ids, mask = _left_pad([row.prompt[n:] for row, n in zip(joining, reused)], self.pad_id, device)
        positions = (mask.cumsum(-1) - 1).masked_fill_(mask == 0, 1) + torch.tensor(reused, device=device)[:, None]
        past = None
        if max(reused):
            width = max(reused)
            stored = [self.prefixes.kv(key, n) for key, n in matches]
            past = DynamicCache(ddp_cache_data=[
                (torch.cat([_pad_left(row[layer][0][None], width) for row in stored]),
                 torch.cat([_pad_left(row[layer][1][None], width) for row in stored]))
                for layer in range(len(stored[0]))])
            past_mask = torch.tensor([[0] * (width - n) + [1] * n for n in reused], dtype=mask.dtype, device=device)
            mask = torch.cat([past_mask, mask], dim=1)
        out = self.model(input_ids=ids, attention_mask=mask, position_ids=positions, past_key_values=past,
                         use_cache=True, **self._logits_args())
        cache = out.past_key_values
        self._sample(out.logits[:, -1, :], joining)
        if self.prefixes is not None and _plain(cache):
            for i, row in enumerate(joining):
                columns = mask[i].nonzero()[:, 0]
                self.prefixes.add(row.prompt, [(layer.keys[i].index_select(1, columns),
                                                layer.values[i].index_select(1, columns)) for layer in cache.layers])
        self._join(joining, cache, mask)

    def _join(self, joining: list[_Row], cache: Any, mask: torch.Tensor) -> None:
        if not self.rows:
            self.cache, self.mask, self.rows, self.live = cache, mask, joining, [True] * len(joining)
            self.joinable = _plain(cache)
            return
        # Merge: both caches left padded to the longer one, the joining rows after the running ones.
        length = max(self.mask.shape[1], mask.shape[1])
        for mine, theirs in zip(self.cache.layers, cache.layers):
            mine.keys = torch.cat([_pad_left(mine.keys, length), _pad_left(theirs.keys, length)])
            mine.values = torch.cat([_pad_left(mine.values, length), _pad_left(theirs.values, length)])
        self.mask = torch.cat([_pad_left(self.mask, length), _pad_left(mask, length)])
        self.rows, self.live = self.rows + joining, self.live + [True] * len(joining)

    def _sample(self, logits: torch.Tensor, rows: list[Optional[_Row]]) -> None:
        """`rows[i]` (None: skip) samples its next token from `logits[i]` [V]: the call's temperature and top-p
        warpers, then its own generator (or argmax); its logprob is the token's under those processed scores."""
        sampling = self.sampling
        scores = logits.float()
        if sampling.temperature > 0:
            if sampling.temperature != 1.0:
                scores = TemperatureLogitsWarper(sampling.temperature)(None, scores)
            if sampling.top_p < 1.0:
                scores = TopPLogitsWarper(sampling.top_p)(None, scores)
        logprobs = torch.log_softmax(scores, dim=-1)
        index = [i for i, row in enumerate(rows) if row is not None]
        if sampling.temperature == 0:
            tokens = scores[index].argmax(-1)
        else:  # one draw per row from its own generator; greedy rows take the most probable token
            tokens = _draw(torch.softmax(scores[index], dim=-1), [rows[i].generator for i in index])
        picked = logprobs[index].gather(1, tokens[:, None])[:, 0]
        for i, token, logprob in zip(index, tokens.tolist(), picked.tolist()):  # one device-to-host copy a step
            rows[i].ids.append(token)
            rows[i].logprobs.append(logprob)

    def _retire(self) -> list[_Row]:
        """Take out the rows that just finished; with a plain cache, their cache rows and the pad-only columns too."""
        done = [i for i, (row, live) in enumerate(zip(self.rows, self.live))
                if live and (row.ids[-1] in self.stop_ids or len(row.ids) >= row.max_new_tokens)]
        if not done:
            return []
        finished = [self.rows[i] for i in done]
        if not self.joinable:  # as `model.generate`: the batch keeps its shape until every row is done
            for i in done:
                self.live[i] = False
            if not any(self.live):
                self._reset()
            return finished
        keep = [i for i in range(len(self.rows)) if i not in set(done)]
        if not keep:
            self._reset()
            return finished
        self.rows, self.live = [self.rows[i] for i in keep], [True] * len(keep)
        index = torch.tensor(keep, device=self.mask.device)
        self.mask = self.mask[index]
        drop = int((self.mask.cumsum(1) == 0).sum(1).min())  # columns that are padding in every remaining row
        for layer in self.cache.layers:
            layer.keys, layer.values = layer.keys[index, :, drop:], layer.values[index, :, drop:]
        self.mask = self.mask[:, drop:]
        return finished

    def _reset(self) -> None:
        self.rows, self.live, self.cache, self.mask, self.joinable = [], [], None, None, True


class HFBackend(StreamingBackend):
    """Our own decode loop over a transformers model: exact completion ids and sampling logprobs, and a
    request queue (`submit`/`poll`) that the pipelined rollout engine feeds as episodes become ready."""

    def __init__(
        self,
        model_or_path: Any,
        tokenizer: Any,
        device: str = "auto",
        dtype: str = "auto",
        batch_size: int = 8,
        attn_implementation: str = "sdpa",
        trust_remote_code: bool = False,
        prefix_cache_mb: float = 256,
    ):
        """`model_or_path`: a checkpoint directory, or a loaded model (e.g. the training model itself,
        which is then shared: `update_weights(model)` with the same object costs nothing).
        `batch_size`: most requests decoded at once. `prefix_cache_mb`: memory for the keys and values of
        prompts already prefilled, which later prompts that start the same way reuse (0: none)."""
        if isinstance(model_or_path, (str, os.PathLike)):
            model_or_path = _load(str(model_or_path), device, dtype, attn_implementation, trust_remote_code)
        self.model = model_or_path
        self.tokenizer = tokenizer
        self.batch_size = batch_size
        self.stop_ids = stop_token_ids(tokenizer, getattr(self.model, "generation_config", None))
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else self.stop_ids[0]
        self._load_args = (device, dtype, attn_implementation, trust_remote_code)
        self._stream = SamplingStream()
        self._decoder: Optional[_Decoder] = None
        self._prefixes = _PrefixStore(int(prefix_cache_mb * 2**20)) if prefix_cache_mb > 0 else None

    # -- generation ---------------------------------------------------------------------

    def generate(self, requests: list[GenerationRequest], sampling: SamplingSettings) -> list[Completion]:
        if self._decoder is not None and self._decoder.busy:
            raise RuntimeError("hf backend: generate() while submitted requests are still decoding; poll() them first")
        for i, request in enumerate(requests):
            _check_prompt(request, i)
        # Each request's own seed (base.py), drawn in request order before any batching.
        rows = [self._row(request, sampling, f"#{i}") for i, request in enumerate(requests)]
        decoder = _Decoder(self.model, self.stop_ids, self.pad_id, self.batch_size, self._prefixes)
        for row in sorted(rows, key=lambda r: len(r.prompt)):  # similar lengths decode together: less padding
            decoder.add(row, sampling)
        with _eval_mode(self.model):
            while decoder.busy:
                decoder.step()
        return [self._completion(row.ids, row.logprobs) for row in rows]

    def submit(self, request: GenerationRequest, sampling: SamplingSettings) -> None:
        """Queue `request`; it joins the running batch at the next `poll`."""
        _check_prompt(request, 0)
        if self._decoder is None:
            self._decoder = _Decoder(self.model, self.stop_ids, self.pad_id, self.batch_size, self._prefixes)
        self._decoder.add(self._row(request, sampling, request.key), sampling)

    def poll(self) -> list[tuple[str, Completion]]:
        """One decoding step (every running request advances one token); the requests that finished."""
        if self._decoder is None or not self._decoder.busy:
            return []
        with _eval_mode(self.model):
            done = self._decoder.step()
        return [(row.key, self._completion(row.ids, row.logprobs)) for row in done]

    def _row(self, request: GenerationRequest, sampling: SamplingSettings, key: str) -> _Row:
        seed = request.seed if request.seed is not None else self._stream.next_seed(sampling.seed)
        greedy = sampling.of(request).temperature == 0  # the one rule of base.py, as the vllm backends apply it
        generator = None if greedy else torch.Generator(device=next(self.model.parameters()).device).manual_seed(seed)
        return _Row(key=key, prompt=list(request.prompt_ids), max_new_tokens=sampling.max_new_tokens,
                    generator=generator)

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
        if self._decoder is not None and self._decoder.busy:
            raise RuntimeError("hf backend: update_weights() while submitted requests are still decoding; "
                               "poll() them first")
        if isinstance(model, (str, os.PathLike)):
            self.model, self._decoder = _load(str(model), *self._load_args), None
            self.reset_prefix_cache()
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

    def reset_prefix_cache(self) -> None:
        if self._prefixes is not None:
            self._prefixes.clear()

    def release(self) -> None:
        self.model, self._decoder = None, None
        self.reset_prefix_cache()
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
    """Generate without dropout, then restore the training model's mode.

    A model already in eval mode is left alone: switching the mode walks every module,
    which cost a tenth of a decoding step (`poll` runs one step per call) on the tiny model.
    """
    if not model.training:
        yield
        return
    model.eval()
    try:
        yield
    finally:
        model.train()


def _draw(probs: torch.Tensor, generators: list[Optional[torch.Generator]]) -> torch.Tensor:
    """For each row i of `probs` [B, V], `torch.multinomial(probs[i], 1, generator=generators[i])`, token for token
    (the argmax where the generator is None), leaving each generator where multinomial leaves it.

    multinomial draws one sample as argmax(p / q), q a vector of Exp(1) variates from the
    generator (the exponential race). Here each row still draws its own variates from its
    own generator, and the division, the argmax and multinomial's validity check run once
    for the whole batch instead of once per row (a test compares with torch.multinomial).
    """
    if not bool(probs.min() >= 0) or not bool(probs.max() < float("inf")):  # min and max of a NaN are NaN
        raise RuntimeError("hf backend: the model's next-token probabilities contain inf, nan or negative values "
                           "(non-finite logits: check the checkpoint or the last update)")
    races = _exponential_races(probs, generators)
    greedy = [i for i, generator in enumerate(generators) if generator is None]
    if greedy:
        races[greedy] = 1.0
    return (probs / races).argmax(-1)


def _exponential_races(probs: torch.Tensor, generators: list[Optional[torch.Generator]]) -> torch.Tensor:
    """Row i: `torch.empty_like(probs[i]).exponential_(generator=generators[i])` (rows without one: undefined).

    On CPU, exponential_ makes each variate as -log1p(-u), u a 53-bit double uniform from the
    generator, one scalar log at a time, so it costs about 3x what drawing the uniforms does.
    `uniform_` on a float64 tensor draws the same u's (the same numbers taken from the
    generator), and the log then runs vectorised over the batch, cast to float as exponential_
    casts. CUDA's exponential_ uses its own algorithm, so other devices call it per row.
    """
    if probs.device.type != "cpu":
        races = torch.empty_like(probs)
        for row, generator in zip(races, generators):
            if generator is not None:
                row.exponential_(1.0, generator=generator)
        return races
    uniforms = torch.zeros(probs.shape, dtype=torch.float64)
    for row, generator in zip(uniforms, generators):
        if generator is not None:
            row.uniform_(generator=generator)
    return torch.log1p(uniforms.neg_()).neg_().to(probs.dtype)


def _check_prompt(request: GenerationRequest, index: int) -> None:
    if not request.prompt_ids:
        raise ValueError(f"request {index} (key {request.key!r}) has no prompt_ids; the hf backend needs token ids")


def _pad_left(tensor: torch.Tensor, length: int) -> torch.Tensor:
    """Zeros on the left of the sequence axis (dim 1 of a [B, T] mask, dim 2 of a [B, H, T, D] cache tensor)."""
    dim = 1 if tensor.dim() == 2 else 2
    missing = length - tensor.shape[dim]
    if missing == 0:
        return tensor
    shape = list(tensor.shape)
    shape[dim] = missing
    return torch.cat([tensor.new_zeros(shape), tensor], dim=dim)


def _plain(cache: Any) -> bool:
    """A cache of full-attention layers only, whose rows and columns can be cut and joined."""
    return all(type(layer) is DynamicLayer for layer in getattr(cache, "layers", [None]))
