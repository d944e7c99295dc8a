"""The SFT loss computed only where it is defined: the LM head runs on supervised positions.

With assistant-only loss, about one token in ten carries a label; the rest are prompt
and observation. TRL's fused LM head skips the unlabelled positions on Triton devices
(GPU) but projects every position elsewhere, and with a small model on CPU that
projection is about half of the forward pass. `SupervisedHeadSFTTrainer` keeps TRL's
path on GPU and, on CPU, asks the model for the logits of the labelled positions only
(`logits_to_keep` with the position indices, a standard transformers forward argument,
so DDP and PEFT wrappers are called as usual).

Loss (identical to TRL's "nll"): the sum of -log p(label) over labelled tokens, divided
by `num_items_in_batch` (labelled tokens over the whole optimizer step, all processes)
or, without it, by the labelled tokens of this micro-batch; multiplied by the process
count when tokens are averaged across devices, since DDP averages gradients.
"""

from __future__ import annotations

import torch
from trl import SFTTrainer

IGNORE_INDEX = -100


def supervised_positions(labels: torch.Tensor) -> torch.Tensor:
    """[S-1] sorted positions p (over the batch) whose next token labels[:, p+1] carries loss.

    labels: [B, S] with IGNORE_INDEX on unlabelled tokens.
    """
    return (labels[:, 1:] != IGNORE_INDEX).any(dim=0).nonzero().squeeze(-1)


def token_logprobs(logits: torch.Tensor, targets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Log-probabilities of the targets and the mask of labelled tokens.

    logits: [B, K, V]; targets: [B, K] with IGNORE_INDEX where unlabelled.
    Returns ([B, K] log p(target), zero where unlabelled; [B, K] bool mask).
    """
    mask = targets != IGNORE_INDEX
    logp = torch.log_softmax(logits.float(), dim=-1)
    picked = logp.gather(-1, targets.clamp(min=0).unsqueeze(-1)).squeeze(-1)
    return picked * mask, mask


class SupervisedHeadSFTTrainer(SFTTrainer):
    """SFTTrainer whose CPU loss projects only the supervised positions through the LM head."""

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        labels = inputs.get("labels")
        if (labels is None or labels.device.type != "cpu" or "attention_mask" not in inputs or return_outputs
                or self.args.loss_type != "nll"):
            return super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
        keep = supervised_positions(labels)  # [K]
        forward = {k: v for k, v in inputs.items() if k != "labels"}
        logits = model(**forward, use_cache=False, logits_to_keep=keep).logits  # [B, K, V]
        picked, mask = token_logprobs(logits, labels[:, keep + 1])  # [B, K] each
        denominator = mask.sum().clamp(min=1) if num_items_in_batch is None else num_items_in_batch
        loss = -picked.sum() / denominator
        if self.args.average_tokens_across_devices and num_items_in_batch is not None:
            loss = loss * self.accelerator.num_processes
        self._log_token_metrics(logits.detach(), labels[:, keep + 1], mask, inputs)
        return loss

    def _log_token_metrics(self, logits: torch.Tensor, targets: torch.Tensor, mask: torch.Tensor, inputs) -> None:
        """TRL's per-step metrics (entropy, mean_token_accuracy, num_tokens) over the labelled tokens."""
        mode = "train" if self.model.training else "eval"
        logp = torch.log_softmax(logits.float(), dim=-1)
        entropy = -(logp.exp() * logp).sum(-1)  # [B, K]
        correct = (logits.argmax(-1) == targets) & mask
        gather = self.accelerator.gather_for_metrics
        valid = gather(mask.sum()).sum()
        if valid > 0:
            self._metrics[mode]["entropy"].append((gather((entropy * mask).sum()).sum() / valid).item())
            self._metrics[mode]["mean_token_accuracy"].append((gather(correct.sum()).sum() / valid).item())
        if mode == "train":
            self._total_train_tokens += gather(inputs["attention_mask"].sum()).sum().item()
        self._metrics[mode]["num_tokens"] = [self._total_train_tokens]
