"""The supervised-positions SFT loss: hand-computed pieces and equality with the full-logits loss."""

import math

import torch
import torch.nn.functional as F

from evoharness_rl.models import load_model
from evoharness_rl.sft.loss import IGNORE_INDEX, supervised_positions, token_logprobs

X = IGNORE_INDEX


def test_supervised_positions_are_the_union_over_rows_of_positions_before_a_label():
    labels = torch.tensor([[X, X, 5, 6, X],
                           [X, 7, X, X, X]])
    # position p predicts labels[:, p + 1]: row 0 needs 1 and 2, row 1 needs 0
    assert supervised_positions(labels).tolist() == [0, 1, 2]
    assert supervised_positions(torch.full((2, 4), X)).numel() == 0


def test_token_logprobs_by_hand():
    logits = torch.tensor([[[0.0, 0.0], [math.log(3.0), 0.0]]])  # [1, 2, 2]
    picked, mask = token_logprobs(logits, torch.tensor([[1, 0]]))
    assert torch.allclose(picked, torch.tensor([[math.log(0.5), math.log(0.75)]]))
    picked, mask = token_logprobs(logits, torch.tensor([[X, 0]]))
    assert mask.tolist() == [[False, True]] and picked[0, 0] == 0.0


def test_loss_on_kept_positions_equals_the_full_logits_loss(tiny_model):
    from evoharness_rl.config import ModelConfig

    model = load_model(ModelConfig(path=tiny_model), device="cpu", dtype="float32")
    torch.manual_seed(0)
    ids = torch.randint(10, 500, (3, 24))
    labels = torch.full_like(ids, X)
    labels[0, 5:9], labels[1, 15:20], labels[2, 20:] = ids[0, 5:9], ids[1, 15:20], ids[2, 20:]
    mask = torch.ones_like(ids)
    full = model(input_ids=ids, attention_mask=mask).logits
    expected = F.cross_entropy(full[:, :-1].flatten(0, 1), labels[:, 1:].flatten(), ignore_index=X)

    keep = supervised_positions(labels)
    kept = model(input_ids=ids, attention_mask=mask, logits_to_keep=keep).logits
    assert kept.shape == (3, keep.numel(), full.shape[-1]) and keep.numel() < ids.shape[1] - 1
    picked, valid = token_logprobs(kept, labels[:, keep + 1])
    loss = -picked.sum() / valid.sum()
    assert torch.allclose(loss, expected, atol=1e-5)
    loss.backward()  # the kept-positions loss is differentiable through the model
    assert model.get_input_embeddings().weight.grad.abs().sum() > 0
