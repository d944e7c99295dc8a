"""The SFT loss computed only where it is defined, over rows trimmed to their own length.

With assistant-only loss, about one token in ten carries a label; the rest are prompt
and observation. TRL's fused LM head skips the unlabelled positions on Triton devices
(GPU) but projects every position elsewhere, and with a small model on CPU that
projection is about half of the forward pass. `SupervisedHeadSFTTrainer` keeps TRL's
path on GPU and, on CPU:

- hands the LM head only the final hidden states of the labelled positions (a forward
  pre-hook on the output embeddings, inside the model's own forward, so DDP and PEFT
  wrappers are called as usual). Selecting per row matters: one position list shared
  by all rows (`logits_to_keep`) is the union of the rows' responses, eight times the
  labelled tokens in a batch of eight per-turn examples;
- runs the collated batch as a few forwards of length-sorted rows, each trimmed to its
  longest row (`row_chunks`), instead of one forward padded to the batch's longest:
  per-turn examples of 200-500 tokens padded in random batches of 8 compute ~25% padding,
  chunks ~7% (2.4 forwards a batch). The rows are right-padded, so no attention mask is
  needed (causal attention never lets a real token see the padding after it) and
  attention keeps its fast mask-free path. With several processes the batch stays one chunk (DDP's gradient hooks
  allow one forward per backward).

Loss (identical to TRL's "nll"): the sum of -log p(label) over labelled tokens, divided
by `num_items_in_batch` (labelled tokens over the whole optimizer step, all processes)
or, without it, by the labelled tokens of this micro-batch; multiplied by the process
count when tokens are averaged across devices, since DDP averages gradients. The same
examples make the same loss; only the order of float reductions differs from one padded
forward.
"""

from __future__ import annotations

import torch
from trl import SFTTrainer

from evoharness_rl.models import only_positions

IGNORE_INDEX = -100
CHUNK_PADDING = 0.1  # a row joins the previous (longer) rows' forward while padding stays within this share of their tokens


def right_padded(mask: torch.Tensor) -> bool:
    """Whether every row of the [B, S] attention mask is ones then zeros (padding on the right only)."""
    return bool((mask[:, 1:] <= mask[:, :-1]).all())


def row_chunks(lengths: list[int], padding: float = CHUNK_PADDING) -> list[list[int]]:
    """Row indices sorted longest first, cut into runs padded to their first row by at most `padding` of their tokens."""
    chunks: list[list[int]] = []
    for row in sorted(range(len(lengths)), key=lambda r: -lengths[r]):
        if chunks:
            last = chunks[-1]
            tokens = sum(lengths[r] for r in last) + lengths[row]
            if lengths[last[0]] * (len(last) + 1) <= (1 + padding) * tokens:
                last.append(row)
                continue
        chunks.append([row])
    return chunks


def flat_supervised(labels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """([N] positions of the flattened [R, W] rows that predict a label, [N] those labels).

    labels: [R, W] with IGNORE_INDEX on unlabelled tokens; position (r, t) predicts labels[r, t + 1].
    """
    width = labels.shape[1]
    rows, cols = (labels[:, 1:] != IGNORE_INDEX).nonzero(as_tuple=True)
    return rows * width + cols, labels[rows, cols + 1]


@torch.no_grad()
def token_stats(logp: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """[3]: labelled tokens, their summed entropy, how many have the label as top-1 (logp [N, V], targets [N])."""
    entropy = -(logp.exp() * logp).sum()
    correct = (logp.argmax(-1) == targets).sum()
    return torch.stack([torch.tensor(float(targets.numel())), entropy.float(), correct.float()])


class SupervisedHeadSFTTrainer(SFTTrainer):
    """SFTTrainer whose CPU loss runs length-sorted row chunks and projects only the supervised positions."""

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        labels, mask = inputs.get("labels"), inputs.get("attention_mask")
        if (labels is None or labels.device.type != "cpu" or mask is None or return_outputs
                or self.args.loss_type != "nll" or set(inputs) != {"input_ids", "attention_mask", "labels"}
                or not right_padded(mask)):
            return super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
        lengths = mask.sum(dim=1).tolist()
        # Several forwards before one backward would trip DDP's gradient hooks: with more processes, one chunk.
        chunks = row_chunks(lengths) if self.accelerator.num_processes == 1 else [list(range(len(lengths)))]
        labelled = (labels[:, 1:] != IGNORE_INDEX).sum()
        denominator = labelled.clamp(min=1) if num_items_in_batch is None else num_items_in_batch
        loss, stats = 0.0, torch.zeros(3)  # stats: labelled tokens, entropy sum, correct top-1
        for rows in chunks:
            width = max(lengths[r] for r in rows)
            ids, chunk_labels = inputs["input_ids"][rows, :width], labels[rows, :width]
            positions, targets = flat_supervised(chunk_labels)
            with only_positions(model, positions):
                logits = model(input_ids=ids, use_cache=False).logits[0]  # [N, V]; no mask: right padding is never seen
            logp = torch.log_softmax(logits.float(), dim=-1)
            loss = loss - logp.gather(-1, targets[:, None]).sum()
            stats += token_stats(logp, targets)
        loss = loss / denominator
        if self.args.average_tokens_across_devices and num_items_in_batch is not None:
            loss = loss * self.accelerator.num_processes
        self._log_token_metrics(stats, mask)
        return loss

    def _log_token_metrics(self, stats: torch.Tensor, mask: torch.Tensor) -> None:
        """TRL's per-step metrics (entropy, mean_token_accuracy, num_tokens) over the labelled tokens."""
        mode = "train" if self.model.training else "eval"
        valid, entropy, correct = self.accelerator.gather_for_metrics(stats[None]).sum(dim=0).tolist()
        if valid > 0:
            self._metrics[mode]["entropy"].append(entropy / valid)
            self._metrics[mode]["mean_token_accuracy"].append(correct / valid)
        if mode == "train":
            self._total_train_tokens += self.accelerator.gather_for_metrics(mask.sum()).sum().item()
        self._metrics[mode]["num_tokens"] = [self._total_train_tokens]
