"""scripts/bench_grpo.py: a step's samples are micro-batches as the trainer cuts them from a sorted mini-batch."""

from __future__ import annotations

import random

import pytest

from evoharness_rl.grpo.batch import micro_batches
from tests.fakes.scripts import load_script


@pytest.fixture(scope="module")
def bench_grpo():
    return load_script("bench_grpo")


LENGTHS = [(random.Random(i).randint(150, 450), random.Random(-i).randint(20, 60)) for i in range(180)]


def test_a_step_is_micro_batches_of_a_sorted_mini_batch(bench_grpo):
    picked = bench_grpo.step_lengths(LENGTHS, 16, seed=0, mini_batch=256, micro=8)
    assert len(picked) == 16 and set(picked) <= set(LENGTHS)
    runs = [picked[:8], picked[8:]]
    assert all(run == sorted(run, key=sum) for run in runs)
    assert max(map(sum, runs[0])) <= min(map(sum, runs[1]))  # two quantiles of the mini-batch, in order
    spread = max(map(sum, LENGTHS)) - min(map(sum, LENGTHS))
    assert all(sum(run[-1]) - sum(run[0]) < spread / 4 for run in runs)  # rows of a micro-batch are alike
    # the trainer's own cut of these samples gives back the same two micro-batches
    samples = bench_grpo.make_samples(LENGTHS, 16, vocab=100, seed=0, mini_batch=256, micro=8)
    cut = micro_batches(samples, 8)
    assert [[len(s.input_ids) for s in mb] for mb in cut] == [[p + c for p, c in run] for run in runs]


def test_a_mini_batch_of_the_step_alone_draws_at_random(bench_grpo):
    picked = bench_grpo.step_lengths(LENGTHS, 16, seed=0, mini_batch=16, micro=8)
    assert len(picked) == 16 and picked != sorted(picked, key=sum)
    assert picked == bench_grpo.step_lengths(LENGTHS, 16, seed=0, mini_batch=0, micro=8)
