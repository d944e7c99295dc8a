"""Which tasks each update trains on: a seeded, resumable stream over the train split.

The split is shuffled once per pass (epoch) with `seed + epoch`; update u takes the next
`prompts_per_update` tasks of that stream. The position is part of the checkpoint, so a
resumed run trains on exactly the tasks the uninterrupted run would have.
"""

from __future__ import annotations

import random


class TaskSampler:
    def __init__(self, task_ids: list[str], seed: int):
        if not task_ids:
            raise ValueError("the train split has no tasks; run `evoharness-rl prepare` or check env.data_path")
        self.task_ids = list(task_ids)
        self.seed = seed
        self.consumed = 0  # tasks handed out so far (over all passes)

    def _order(self, epoch: int) -> list[str]:
        order = list(self.task_ids)
        random.Random(self.seed * 1_000_003 + epoch).shuffle(order)
        return order

    def next(self, n: int) -> list[str]:
        """The next `n` tasks of the stream (wrapping into a new shuffled pass as needed)."""
        out: list[str] = []
        while len(out) < n:
            epoch, offset = divmod(self.consumed, len(self.task_ids))
            take = min(n - len(out), len(self.task_ids) - offset)
            out.extend(self._order(epoch)[offset:offset + take])
            self.consumed += take
        return out

    def state_dict(self) -> dict:
        return {"consumed": self.consumed, "seed": self.seed, "num_tasks": len(self.task_ids)}

    def load_state_dict(self, state: dict) -> None:
        if state["num_tasks"] != len(self.task_ids) or state["seed"] != self.seed:
            raise ValueError(
                f"checkpoint sampler was built for {state['num_tasks']} train tasks with seed {state['seed']}; "
                f"this run "
                f"has {len(self.task_ids)} tasks with seed {self.seed}. Resume with the same data and seed."
            )
        self.consumed = int(state["consumed"])
