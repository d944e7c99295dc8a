"""The supervised-positions SFT loss: hand-computed pieces and equality with the full-logits loss."""

import torch
import torch.nn.functional as F

from evoharness_rl.models import load_model
from evoharness_rl.models import only_positions
from evoharness_rl.sft.loss import IGNORE_INDEX, flat_supervised, right_padded, row_chunks

X = IGNORE_INDEX


def test_flat_supervised_positions_are_per_row_positions_before_a_label():
    labels = torch.tensor([[X, X, 5, 6, X],
                           [X, 7, X, X, X]])
    # (r, t) predicts labels[r, t + 1]: row 0 needs 1 and 2, row 1 needs 0 -> flattened 1, 2, 5
    positions, targets = flat_supervised(labels)
    assert positions.tolist() == [1, 2, 5] and targets.tolist() == [5, 6, 7]
    assert flat_supervised(torch.full((2, 4), X))[0].numel() == 0


def test_row_chunks_sort_longest_first_and_bound_padding():
    assert row_chunks([300, 500, 310, 490], padding=0.1) == [[1, 3], [2, 0]]
    assert row_chunks([300, 500], padding=0.1) == [[1], [0]]  # together they would pad 200 of 800 tokens
    assert row_chunks([3, 3, 3], padding=0.0) == [[0, 1, 2]]
    assert sorted(r for c in row_chunks([7, 1, 4, 4, 9, 2]) for r in c) == list(range(6))


def test_right_padded():
    assert right_padded(torch.tensor([[1, 1, 0], [1, 1, 1]]))
    assert not right_padded(torch.tensor([[0, 1, 1], [1, 1, 1]]))


def test_chunked_loss_and_gradient_equal_the_padded_full_logits_loss(tiny_model):
    """Rows trimmed to their own length without a mask, LM head on the labelled positions only: the same loss and
    gradients as one padded forward with the attention mask and logits everywhere."""
    from evoharness_rl.config import ModelConfig

    model = load_model(ModelConfig(path=tiny_model), device="cpu", dtype="float32")
    torch.manual_seed(0)
    lengths = [24, 11, 17]
    ids = torch.randint(10, 500, (3, 24))
    mask = (torch.arange(24)[None] < torch.tensor(lengths)[:, None]).long()
    labels = torch.full_like(ids, X)
    labels[0, 5:9], labels[1, 6:11], labels[2, 12:17] = ids[0, 5:9], ids[1, 6:11], ids[2, 12:17]
    full = model(input_ids=ids, attention_mask=mask).logits
    expected = F.cross_entropy(full[:, :-1].flatten(0, 1), labels[:, 1:].flatten(), ignore_index=X, reduction="sum")
    expected.backward()
    grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()

    loss = 0.0
    for rows in row_chunks(lengths):
        width = max(lengths[r] for r in rows)
        positions, targets = flat_supervised(labels[rows, :width])
        with only_positions(model, positions):
            logits = model(input_ids=ids[rows, :width]).logits[0]
        assert logits.shape == (targets.numel(), full.shape[-1])
        loss = loss - torch.log_softmax(logits, -1).gather(-1, targets[:, None]).sum()
    assert torch.allclose(loss, expected, atol=1e-4)
    loss.backward()
    for p, g in zip(model.parameters(), grads):
        assert torch.allclose(p.grad, g, atol=1e-5)
