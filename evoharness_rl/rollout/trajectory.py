"""Typed trajectory records: exactly what the model saw and produced, and what happened.

A `Trajectory` is one episode. Each `Turn` keeps the exact prompt and completion token
ids and the sampling logprobs the generation backend returned (token-in, token-out:
ids are never re-tokenised from text). Backends without token access (openai,
scripted, replay) leave the id/logprob lists empty.

For `accumulated` context, `sequence_ids` / `sequence_logprobs` / `loss_mask` hold the
whole conversation as one sequence: `loss_mask[i] == 1` exactly on tokens the policy
generated; environment, prompt and template tokens are 0.

Records serialise to JSON lines (`to_dict` / `from_dict`) and to a `datasets.Dataset`
(`to_dataset`).
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field, fields
from typing import Any, Iterable

from evoharness_rl.fileio import atomic_write_text


@dataclass
class Turn:
    """One policy decision and its consequence."""

    index: int  # 0-based turn number (== step number; every turn costs one step)
    messages: list[dict[str, str]]  # chat messages of the prompt (per_turn) or the new messages (accumulated)
    response: str  # the raw completion text
    action_kind: str  # "env" | "harness" | "invalid"
    action: str  # env action string / harness argument / "" for invalid
    verb: str | None = None  # harness verb for harness actions
    invalid_reason: str | None = None  # protocol or environment reason for invalid actions
    observation: str = ""  # what the action returned (env observation, harness result or feedback)
    harness_view: str = ""  # the harness views rendered into this turn's prompt
    belief: str = ""  # the Belief state after the turn (Belief.render(); "" when the module is off)
    progress: str = ""  # the Progress record after the turn ("" when the module is off)
    repeated: bool = False  # same action as the previous turn
    schedule: str = ""  # schedule ablations: "injected" (the scheduled call replaced the response) | "refused" (a
    # harness call off the schedule, asked again; no step spent) | "" (the response was applied)
    prompt_ids: list[int] = field(default_factory=list)  # exact prompt token ids sent to the backend
    completion_ids: list[int] = field(default_factory=list)  # exact token ids the backend produced
    logprobs: list[float] = field(default_factory=list)  # sampling logprob of each completion id
    prompt_truncated: bool = False  # what this turn added to the prompt was cut to max_prompt_tokens (rollout.engine)

    def check_tokens(self) -> None:
        if len(self.completion_ids) != len(self.logprobs):
            raise ValueError(
                f"turn {self.index}: {len(self.completion_ids)} completion ids but {len(self.logprobs)} logprobs; "
                "the backend must return one logprob per generated token"
            )


@dataclass
class Trajectory:
    """One episode."""

    task_id: str
    family: str
    env: str
    split: str = ""
    objective: str = ""
    mode: str = "adaptive"  # harness mode
    context: str = "per_turn"  # "per_turn" | "accumulated"
    prompt_version: str = ""  # EnvSpec.prompt_version of the prompts it was played with (SFT rejects stale data)
    seed: int = 0
    turns: list[Turn] = field(default_factory=list)
    won: bool = False
    score: float = 0.0
    steps: int = 0  # env + harness + invalid steps taken
    max_steps: int = 0  # the step budget of the episode
    truncated: bool = False  # stopped by the step budget (never a success)
    token_capped: bool = False  # accumulated context: ended by policy.max_trajectory_tokens (never a success)
    invalid_count: int = 0
    repeat_count: int = 0  # consecutive repeats of the previous action
    harness_calls: dict[str, int] = field(default_factory=dict)  # verb -> count
    notes: list[str] = field(default_factory=list)  # note [..] contents (evidence for consolidation)
    recalled_ids: list[str] = field(default_factory=list)  # Experience entry ids shown to the policy
    scheduled_calls: list[list] = field(default_factory=list)  # schedule ablations: the plan, [[step, verb, arg]]
    refused_calls: int = 0  # schedule ablations: the policy's harness calls refused off the schedule (no step)
    error: str | None = None  # infrastructure failure (env crash, backend down); not a policy failure
    rewards: dict[str, float] = field(default_factory=dict)  # reward components (grpo.core)
    sequence_ids: list[int] = field(default_factory=list)  # accumulated: whole conversation ids
    sequence_logprobs: list[float] = field(default_factory=list)  # accumulated: logprob per id (0 where mask 0)
    loss_mask: list[int] = field(default_factory=list)  # accumulated: 1 on generated tokens
    fingerprint: str = ""  # identity of (model, bank, config) that produced it (eval resume)
    bank_version: str = ""  # content hash of the Experience bank it was played with ("": no bank)
    bank_cycle: int = 0  # consolidation cycles that bank had been through
    wall_s: float = 0.0

    @property
    def verbs_used(self) -> set[str]:
        return {verb for verb, n in self.harness_calls.items() if n > 0}

    @property
    def generated_tokens(self) -> int:
        return sum(len(t.completion_ids) for t in self.turns)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def played_with(self, snapshot: Any) -> "Trajectory":
        """Record which bank the episode read (a `BankSnapshot`, or None for no bank); returns self."""
        self.bank_version = getattr(snapshot, "content_hash", "") or ""
        self.bank_cycle = int(getattr(snapshot, "cycle", 0) or 0)
        return self

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Trajectory":
        known = {f.name for f in fields(cls)}
        data = {k: v for k, v in data.items() if k in known}
        data["turns"] = [Turn(**t) for t in data.get("turns", [])]
        return cls(**data)


def write_jsonl(path: str | os.PathLike, trajectories: Iterable[Trajectory]) -> None:
    atomic_write_text(path, "".join(json.dumps(t.to_dict(), ensure_ascii=False) + "\n" for t in trajectories))


def read_jsonl(path: str | os.PathLike) -> list[Trajectory]:
    out = []
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                out.append(Trajectory.from_dict(json.loads(line)))
    return out


def to_dataset(trajectories: Iterable[Trajectory]):
    """A `datasets.Dataset` with one row per trajectory (turns as a JSON string column)."""
    import datasets

    rows = []
    for t in trajectories:
        row = t.to_dict()
        row["turns"] = json.dumps(row["turns"], ensure_ascii=False)
        row["harness_calls"] = json.dumps(row["harness_calls"])
        row["rewards"] = json.dumps(row["rewards"])
        rows.append(row)
    return datasets.Dataset.from_list(rows)
