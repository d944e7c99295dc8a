"""hf backend: exact ids, sampling logprobs equal to a teacher-forced pass, left-padded batches."""

from __future__ import annotations

import copy

import pytest
import torch
from conftest import make_prompts, teacher_forced_logprobs

from evoharness_rl.engines.base import GenerationRequest, SamplingSettings
from evoharness_rl.engines.hf import HFBackend


def _requests(prompts):
    return [GenerationRequest(messages=[], prompt_ids=p, key=f"k{i}") for i, p in enumerate(prompts)]


@pytest.fixture(scope="module")
def backend(hf_model, tokenizer):
    return HFBackend(hf_model, tokenizer, batch_size=4)


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_logprobs_match_teacher_forced_pass(backend, hf_model, tokenizer, temperature):
    prompts = make_prompts(tokenizer, 6)
    out = backend.generate(_requests(prompts), SamplingSettings(temperature=temperature, max_new_tokens=24, seed=0))
    assert {c.finish_reason for c in out} <= {"stop", "length"}
    for prompt, c in zip(prompts, out):
        assert len(c.completion_ids) == len(c.logprobs) > 0
        reference = teacher_forced_logprobs(hf_model, prompt, c.completion_ids, temperature)
        assert torch.allclose(torch.tensor(c.logprobs), reference, atol=1e-3), (c.logprobs, reference.tolist())


def test_top_p_logprobs_are_of_the_renormalised_nucleus(backend, hf_model, tokenizer):
    prompts = make_prompts(tokenizer, 3)
    out = backend.generate(_requests(prompts), SamplingSettings(temperature=1.0, top_p=0.5, max_new_tokens=12, seed=0))
    for prompt, c in zip(prompts, out):
        plain = teacher_forced_logprobs(hf_model, prompt, c.completion_ids)
        assert all(lp >= p - 1e-4 for lp, p in zip(c.logprobs, plain.tolist()))  # renormalised: never lower
        assert any(lp > p + 1e-3 for lp, p in zip(c.logprobs, plain.tolist()))


def test_completion_ends_at_eos_without_padding(backend, tokenizer):
    prompts = make_prompts(tokenizer, 8)
    out = backend.generate(_requests(prompts), SamplingSettings(temperature=1.0, max_new_tokens=40, seed=3))
    stopped = [c for c in out if c.finish_reason == "stop"]
    assert stopped, "the tiny model samples EOS often enough that some of 8 completions stop"
    for c in stopped:
        assert c.completion_ids[-1] == tokenizer.eos_token_id
        assert tokenizer.eos_token_id not in c.completion_ids[:-1]
    for c in out:
        if c.finish_reason == "length":
            assert len(c.completion_ids) == 40 and tokenizer.eos_token_id not in c.completion_ids
        assert tokenizer.pad_token_id not in c.completion_ids or tokenizer.pad_token_id not in backend.stop_ids


def test_ids_are_never_re_tokenised(backend, tokenizer):
    """The returned ids are the sampled ones: decoding and re-encoding the text would not give them back."""
    prompts = make_prompts(tokenizer, 8)
    out = backend.generate(_requests(prompts), SamplingSettings(temperature=1.0, max_new_tokens=24, seed=1))
    differs = [tokenizer.encode(c.text, add_special_tokens=False) != [t for t in c.completion_ids
                                                                     if t not in backend.stop_ids] for c in out]
    assert any(differs)  # random tokens: text round trips are lossy, so the backend must not use them
    for c in out:
        assert c.text == tokenizer.decode(c.completion_ids, skip_special_tokens=True)


def test_model_generation_defaults_do_not_leak(backend, hf_model, tokenizer):
    """The checkpoint ships top_k=20: sampling at T=1 must still draw tokens outside the top 20."""
    assert hf_model.generation_config.top_k == 20
    prompts = make_prompts(tokenizer, 8)
    out = backend.generate(_requests(prompts), SamplingSettings(temperature=1.0, max_new_tokens=16, seed=2))
    outside = 0
    for prompt, c in zip(prompts, out):
        sequence = torch.tensor([prompt + c.completion_ids])
        with torch.no_grad():
            logits = hf_model(sequence).logits[0, len(prompt) - 1 : -1]
        ranks = (logits > logits.gather(-1, torch.tensor(c.completion_ids)[:, None])).sum(-1)
        outside += int((ranks >= 20).sum())
    assert outside > 0
    assert hf_model.generation_config.top_k == 20  # restored after the call


def test_left_padded_batch_equals_single_prompts_greedy(hf_model, tokenizer):
    prompts = make_prompts(tokenizer, 5)
    assert len({len(p) for p in prompts}) > 1  # different lengths: the batch really pads
    greedy = SamplingSettings(temperature=0.0, max_new_tokens=16)
    batched = HFBackend(hf_model, tokenizer, batch_size=8).generate(_requests(prompts), greedy)
    single = HFBackend(hf_model, tokenizer, batch_size=1).generate(_requests(prompts), greedy)
    for b, s, prompt in zip(batched, single, prompts):
        assert b.completion_ids == s.completion_ids
        assert torch.allclose(torch.tensor(b.logprobs), torch.tensor(s.logprobs), atol=1e-4)
        reference = teacher_forced_logprobs(hf_model, prompt, b.completion_ids, temperature=0)
        assert torch.allclose(torch.tensor(b.logprobs), reference, atol=1e-3)


def test_sampling_never_repeats_and_is_reproducible_from_the_seed(hf_model, tokenizer):
    """One stream per backend: successive identical calls differ; a backend built alike replays the sequence."""
    requests = _requests(make_prompts(tokenizer, 3))
    settings = SamplingSettings(max_new_tokens=12, seed=7)

    def calls(backend, n=2):
        return [[c.completion_ids for c in backend.generate(requests, settings)] for _ in range(n)]

    first, second = calls(HFBackend(hf_model, tokenizer, batch_size=4))
    assert first != second  # the stream advanced: no replayed draws
    assert calls(HFBackend(hf_model, tokenizer, batch_size=4)) == [first, second]
    other = HFBackend(hf_model, tokenizer, batch_size=4).generate(requests, SamplingSettings(max_new_tokens=12, seed=8))
    assert [c.completion_ids for c in other] != first


def test_batched_draws_are_torch_multinomial_token_for_token():
    """`_draw` keeps every recorded sampled run: the same token as one torch.multinomial call per row, from the
    same generators, which it leaves in the same state (flat, peaked and nucleus-cut distributions; greedy rows
    among sampled ones)."""
    from evoharness_rl.engines.hf import _draw

    shapes = torch.Generator().manual_seed(0)
    for trial in range(300):
        logits = torch.randn(6, 3503, generator=shapes) * (trial % 9)
        if trial % 3 == 0:  # top-p cut: most of the vocabulary has probability 0
            logits[:, 40:] = float("-inf")
        probs = torch.softmax(logits, dim=-1)
        seeds = [trial * 10 + row for row in range(6)]
        greedy = {trial % 6} if trial % 2 else set()
        generators = [None if row in greedy else torch.Generator().manual_seed(seed) for row, seed in enumerate(seeds)]
        drawn = _draw(probs, generators)
        references = [torch.Generator().manual_seed(seed) for seed in seeds]
        expected = [probs[row].argmax().item() if row in greedy
                    else torch.multinomial(probs[row], 1, generator=references[row]).item()
                    for row in range(6)]
        assert drawn.tolist() == expected, trial
        for row in set(range(6)) - greedy:  # the next step's draws start where multinomial's would
            assert torch.equal(generators[row].get_state(), references[row].get_state()), (trial, row)


def test_non_finite_probabilities_are_an_error_not_a_token():
    from evoharness_rl.engines.hf import _draw

    probs = torch.softmax(torch.randn(2, 10), dim=-1)
    probs[1, 3] = float("nan")
    with pytest.raises(RuntimeError, match="inf, nan or negative"):
        _draw(probs, [torch.Generator().manual_seed(0), None])


def test_sampling_leaves_the_global_torch_generator_alone(backend, tokenizer):
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    backend.generate(_requests(make_prompts(tokenizer, 2)), SamplingSettings(max_new_tokens=4, seed=1))
    assert torch.equal(torch.rand(3), expected)


def test_training_mode_is_restored_and_an_eval_model_is_left_alone(hf_model, tokenizer, monkeypatch):
    modes = []  # the model's mode at each forward
    hook = hf_model.register_forward_pre_hook(lambda module, args: modes.append(module.training))
    backend = HFBackend(hf_model, tokenizer)
    hf_model.train()
    try:
        backend.generate(_requests(make_prompts(tokenizer, 1)), SamplingSettings(max_new_tokens=2))
        assert hf_model.training
        assert modes and not any(modes), "a training model decodes in eval mode (no dropout)"
        hf_model.eval()
        switches = []  # an eval model is never switched: walking every module costs a tenth of a step
        monkeypatch.setattr(hf_model, "train", lambda mode=True: switches.append(mode))
        backend.submit(_requests(make_prompts(tokenizer, 1))[0], SamplingSettings(max_new_tokens=3))
        while not backend.poll():
            pass
        assert switches == [] and not any(modes)
    finally:
        hook.remove()
        monkeypatch.undo()
        hf_model.eval()


def test_update_weights_shared_copied_or_rejected(hf_model, tokenizer, lora_adapter):
    own = copy.deepcopy(hf_model)
    backend = HFBackend(own, tokenizer)
    backend.update_weights(own)  # the same object: nothing to do
    assert backend.model is own
    _, merged = lora_adapter
    backend.update_weights(merged)
    prompt = make_prompts(tokenizer, 1)
    [c] = backend.generate(_requests(prompt), SamplingSettings(temperature=0.0, max_new_tokens=8))
    reference = teacher_forced_logprobs(merged, prompt[0], c.completion_ids, temperature=0)
    assert torch.allclose(torch.tensor(c.logprobs), reference, atol=1e-4)
    shallower = copy.deepcopy(hf_model)
    shallower.model.layers = shallower.model.layers[:1]
    with pytest.raises(ValueError, match="does not match"):
        backend.update_weights(shallower)


def test_update_weights_from_peft_model_merges_adapters(tiny_model_dir, hf_model, tokenizer, lora_adapter):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    adapter_dir, merged = lora_adapter
    peft_model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(tiny_model_dir), adapter_dir)
    backend = HFBackend(copy.deepcopy(hf_model), tokenizer)
    backend.update_weights(peft_model)
    for (name, a), (_, b) in zip(backend.model.named_parameters(), merged.named_parameters()):
        assert torch.allclose(a, b, atol=1e-6), name
    assert any("lora_A" in n for n, _ in peft_model.named_parameters())  # the PEFT model is left unmerged
    x = torch.tensor([make_prompts(tokenizer, 1)[0]])
    with torch.no_grad():
        assert not torch.allclose(peft_model(x).logits, hf_model(x).logits)


def test_missing_prompt_ids_is_an_error(backend):
    with pytest.raises(ValueError, match="no prompt_ids"):
        backend.generate([GenerationRequest(messages=[{"role": "user", "content": "hi"}], key="e1")], SamplingSettings())


def test_a_greedy_request_decodes_greedily_and_scores_at_the_calls_temperature(backend, hf_model, tokenizer):
    """grpo.greedy_samples: a greedy request among sampled ones gets the T=0 tokens with logprobs at the call's
    temperature (what the trainer scores), and the sampled requests beside it are as they would be alone."""
    prompts = make_prompts(tokenizer, 3)
    settings = SamplingSettings(temperature=0.7, max_new_tokens=16, seed=0)
    mixed = _requests(prompts)
    mixed[0].greedy = True
    for i, request in enumerate(mixed):
        request.seed = 100 + i
    out = backend.generate(mixed, settings)
    greedy = backend.generate(_requests(prompts[:1]), SamplingSettings(temperature=0.0, max_new_tokens=16))[0]
    assert out[0].completion_ids == greedy.completion_ids
    reference = teacher_forced_logprobs(hf_model, prompts[0], out[0].completion_ids, 0.7)
    assert torch.allclose(torch.tensor(out[0].logprobs), reference, atol=1e-3)
    sampled = _requests(prompts[1:])
    for i, request in enumerate(sampled, start=1):
        request.seed = 100 + i
    assert [c.completion_ids for c in backend.generate(sampled, settings)] == [c.completion_ids for c in out[1:]]


# -- the request queue (continuous batching) ----------------------------------------------------------------------


def _stream(backend, requests, settings, join_after: dict[int, int]):
    """Submit request i after `join_after.get(i, 0)` polls; poll to the end; completions by key."""
    done, polls = {}, 0
    pending = sorted(range(len(requests)), key=lambda i: join_after.get(i, 0))
    while pending or len(done) < len(requests):
        while pending and join_after.get(pending[0], 0) <= polls:
            backend.submit(requests[pending.pop(0)], settings)
        done.update(backend.poll())
        polls += 1
        assert polls < 10_000
    return [done[r.key] for r in requests]


@pytest.mark.parametrize("temperature", [0.0, 0.7])
def test_requests_that_join_mid_generation_decode_as_in_one_call(hf_model, tokenizer, temperature):
    """Late requests join the running batch (caches merged, left padded, rows leaving as they finish), and each
    request gets the tokens it gets from `generate` with the same seed, whatever shared its steps."""
    prompts = make_prompts(tokenizer, 7)
    settings = SamplingSettings(temperature=temperature, max_new_tokens=20, seed=0)
    requests = _requests(prompts)
    for i, request in enumerate(requests):
        request.seed = 50 + i
    reference = HFBackend(hf_model, tokenizer, batch_size=1).generate(requests, settings)
    backend = HFBackend(hf_model, tokenizer, batch_size=4)  # at most 4 rows: the rest wait for a free one
    streamed = _stream(backend, requests, settings, join_after={2: 3, 3: 3, 4: 9, 5: 30, 6: 31})
    for s, r in zip(streamed, reference):
        assert s.completion_ids == r.completion_ids and s.finish_reason == r.finish_reason
        assert torch.allclose(torch.tensor(s.logprobs), torch.tensor(r.logprobs), atol=1e-4)
    assert not backend._decoder.busy and backend._decoder.cache is None  # drained: nothing is held


def test_finished_rows_leave_the_cache_and_pad_columns_go_with_them(hf_model, tokenizer):
    prompts = make_prompts(tokenizer, 5)
    backend = HFBackend(hf_model, tokenizer, batch_size=8)
    requests = _requests(prompts)
    requests[-1].prompt_ids = prompts[-1] + prompts[-1]  # the longest prompt, which finishes first
    lengths = [1 if i == len(requests) - 1 else 30 for i in range(len(requests))]
    for request, n in zip(requests, lengths):
        backend.submit(request, SamplingSettings(temperature=0.0, max_new_tokens=n))
    [(key, one)] = backend.poll()  # prefill + one step: the one-token request finished at the prefill ...
    assert key == requests[-1].key and len(one.completion_ids) == 1 and one.finish_reason == "length"
    # ... and has gone, and so have the cache columns that only its long prompt needed
    decoder = backend._decoder
    assert len(decoder.rows) == 4
    assert decoder.mask.shape[1] == max(len(p) for p in prompts[:-1]) + 1
    assert decoder.cache.layers[0].keys.shape[:3] == (4, 2, decoder.mask.shape[1])
    assert bool(decoder.mask[:, 0].any())


def test_a_sliding_window_model_decodes_in_cohorts(tmp_path, tokenizer):
    """A cache with sliding-window layers cannot be cut and joined: new requests wait for the batch to drain,
    and the tokens are still those of single-prompt decoding."""
    from transformers import AutoModelForCausalLM

    from tiny_model import build_tiny_model

    path = build_tiny_model(tmp_path / "sliding", seed=1)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32, use_sliding_window=True, sliding_window=8,
                                                 layer_types=["full_attention", "sliding_attention"]).eval()
    assert model.config.layer_types == ["full_attention", "sliding_attention"]
    requests = _requests(make_prompts(tokenizer, 4))
    settings = SamplingSettings(temperature=0.0, max_new_tokens=16)
    reference = HFBackend(model, tokenizer, batch_size=1).generate(requests, settings)
    backend = HFBackend(model, tokenizer, batch_size=4)
    backend.submit(requests[0], settings)
    backend.poll()
    assert not backend._decoder.joinable  # the cache has a sliding-window layer
    backend.submit(requests[1], settings)
    backend.poll()
    assert len(backend._decoder.rows) == 1 and len(backend._decoder.waiting) == 1  # it waits for the batch to drain
    while backend._decoder.busy:
        backend.poll()
    streamed = _stream(backend, requests, settings, join_after={2: 2, 3: 2})
    assert [s.completion_ids for s in streamed] == [r.completion_ids for r in reference]
    with torch.no_grad():  # the window really acts: the model's own generate with a full cache agrees too
        ids = torch.tensor([requests[0].prompt_ids])
        out = model.generate(ids, do_sample=False, max_new_tokens=16, eos_token_id=backend.stop_ids,
                             pad_token_id=backend.pad_id, top_k=None, top_p=None, temperature=None)
    assert out[0, ids.shape[1]:].tolist()[: len(reference[0].completion_ids)] == reference[0].completion_ids


def test_the_queue_refuses_mixed_sampling_and_generate_while_busy(hf_model, tokenizer):
    backend = HFBackend(hf_model, tokenizer, batch_size=4)
    [first, second] = _requests(make_prompts(tokenizer, 2))
    backend.submit(first, SamplingSettings(temperature=0.7, max_new_tokens=8, seed=0))
    with pytest.raises(ValueError, match="cannot join running requests at temperature=0.7"):
        backend.submit(second, SamplingSettings(temperature=1.0, max_new_tokens=8, seed=0))
    with pytest.raises(RuntimeError, match="poll"):
        backend.generate([second], SamplingSettings(max_new_tokens=8))
    with pytest.raises(RuntimeError, match="poll"):
        backend.update_weights(copy.deepcopy(hf_model))
    while backend._decoder.busy:
        backend.poll()
    backend.submit(second, SamplingSettings(temperature=1.0, max_new_tokens=8, seed=0))  # drained: any settings


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_prompts_that_begin_like_earlier_ones_reuse_their_prefix_and_decode_the_same(hf_model, tokenizer,
                                                                                    temperature):
    """A prompt that starts with tokens of a prompt prefilled before prefills only the rest, and gets the tokens
    and (to rounding) the logprobs it gets from a backend that keeps no prefixes."""
    prompts = make_prompts(tokenizer, 5)
    later = [p + p[-12:] for p in prompts] + [prompts[0][:-3] + prompts[1][-20:]]  # extend or branch off earlier ones
    settings = SamplingSettings(temperature=temperature, max_new_tokens=16, seed=0)
    backend = HFBackend(hf_model, tokenizer, batch_size=4)
    plain = HFBackend(hf_model, tokenizer, batch_size=4, prefix_cache_mb=0)
    store = backend._prefixes
    backend.generate(_requests(prompts), settings)
    assert len(store.entries) == len(prompts)
    matches = [store.match(p) for p in later]
    assert all(n >= len(p) - 3 for (_, n), p in zip(matches[:-1], prompts)) and matches[-1][1] == len(prompts[0]) - 3
    requests = _requests(later)
    for i, request in enumerate(requests):
        request.seed = 7 + i
    reused, fresh = backend.generate(requests, settings), plain.generate(requests, settings)
    for r, f in zip(reused, fresh):
        assert r.completion_ids == f.completion_ids
        assert torch.allclose(torch.tensor(r.logprobs), torch.tensor(f.logprobs), atol=1e-4)
    assert plain._prefixes is None


def test_the_prefix_store_empties_when_the_weights_change_and_keeps_to_its_budget(tiny_model_dir, tokenizer):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()
    prompts = make_prompts(tokenizer, 6)
    greedy = SamplingSettings(temperature=0.0, max_new_tokens=8)
    backend = HFBackend(model, tokenizer, batch_size=8)
    backend.generate(_requests(prompts), greedy)
    assert backend._prefixes.entries
    with torch.no_grad():
        model.lm_head.weight.mul_(3.0)  # what an optimizer step does: an in-place change of a shared model
    after = backend.generate(_requests(prompts), greedy)
    assert after == HFBackend(model, tokenizer, batch_size=8, prefix_cache_mb=0).generate(_requests(prompts), greedy)
    assert all(len(e[0]) in {len(p) for p in prompts} for e in backend._prefixes.entries.values())  # recomputed only

    per_token = sum(2 * layer.self_attn.k_proj.out_features * 4 for layer in model.model.layers)  # bytes (float32)
    small = HFBackend(model, tokenizer, batch_size=8, prefix_cache_mb=2.5 * max(map(len, prompts)) * per_token / 2**20)
    small.generate(_requests(prompts), greedy)
    assert len(small._prefixes.entries) == 2 and small._prefixes.used <= small._prefixes.budget
    prefilled = sorted(prompts, key=len)  # generate() prefills in order of length
    assert [e[0].tolist() for e in small._prefixes.entries.values()] == prefilled[-2:]  # the most recent stay


def _family_model(family: str, attn: str = "sdpa"):
    """A randomly initialised 2-layer model of `family` (grouped-query attention, untied head for llama)."""
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.for_model(family, vocab_size=384, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                  num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                                  tie_word_embeddings=family != "llama", attention_bias=family == "qwen2")
    torch.manual_seed(3)
    return AutoModelForCausalLM.from_config(config, dtype=torch.float32, attn_implementation=attn).eval()


@pytest.mark.parametrize("family", ["llama", "qwen2", "qwen3", "qwen3+lora"])
def test_the_lean_decode_step_gives_transformers_logits_to_the_bit(family, tokenizer):
    """`_LeanStep` against the model's own forward: the same logits and cache after one decode step of left-padded
    rows of different lengths; a PEFT model's LoRA layers take part (the adapter moves the logits)."""
    from peft import LoraConfig, get_peft_model

    from evoharness_rl.engines.hf import _Decoder, _grouped_attention, _LeanStep, _Row

    model = _family_model(family.split("+")[0])
    if family.endswith("+lora"):
        plain = copy.deepcopy(model)
        model = get_peft_model(model, LoraConfig(r=4, target_modules=["q_proj", "k_proj", "v_proj", "o_proj",
                                                                      "up_proj"], init_lora_weights=False)).eval()
    lean = _LeanStep.of(model)
    assert lean is not None
    settings = SamplingSettings(temperature=0.0, max_new_tokens=50)
    decoder = _Decoder(model, stop_ids=[], pad_id=0, max_rows=4)
    for i, prompt in enumerate(make_prompts(tokenizer, 3)):
        decoder.add(_Row(key=str(i), prompt=prompt[: 20 + 9 * i], max_new_tokens=50, generator=None), settings)
    decoder._lean = None  # prefill and three steps through transformers' forward
    for _ in range(4):
        decoder.step()
    ids = torch.tensor([[row.ids[-1]] for row in decoder.rows])
    positions = torch.tensor([[len(row.prompt) + len(row.ids) - 1] for row in decoder.rows])
    mask = torch.cat([decoder.mask, decoder.mask.new_ones((3, 1))], dim=1)
    assert not bool(mask.all())  # the rows really are padded
    theirs_cache, ours_cache = copy.deepcopy(decoder.cache), copy.deepcopy(decoder.cache)
    with torch.no_grad(), _grouped_attention(model, torch.device("cpu")):
        theirs = model(input_ids=ids, attention_mask=mask, position_ids=positions, past_key_values=theirs_cache,
                       use_cache=True).logits[:, -1, :]
        ours = lean(ids, mask, positions, ours_cache)
        if family.endswith("+lora"):
            assert not torch.allclose(ours, plain(input_ids=ids, attention_mask=mask, position_ids=positions,
                                                  past_key_values=copy.deepcopy(decoder.cache)).logits[:, -1, :])
    assert torch.equal(ours, theirs)
    for mine, reference in zip(ours_cache.layers, theirs_cache.layers):
        assert torch.equal(mine.keys, reference.keys) and torch.equal(mine.values, reference.values)


def test_the_lean_decode_step_is_used_only_where_it_is_exact():
    from evoharness_rl.engines.hf import _LeanStep

    assert _LeanStep.of(_family_model("qwen3")) is not None
    assert _LeanStep.of(_family_model("qwen3", attn="eager")) is None  # eager attention: transformers' forward
    assert _LeanStep.of(_family_model("mistral")) is None  # a family it was not checked against
    sliding = _family_model("qwen3")
    sliding.config.layer_types = ["full_attention", "sliding_attention"]
    assert _LeanStep.of(sliding) is None
