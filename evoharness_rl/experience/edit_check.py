"""Edits that must earn their place (`experience.validate_edits`): keep a cycle only if it does not hurt.

After a consolidation cycle, the policy plays a small fixed set of held-out training tasks
greedily, once with the bank as it was before the cycle and once with the bank the cycle
produced (GRPO: `trainer.check_edits`, through the same greedy rollout path as periodic
validation). The verdict is decided here, from the two lists of outcomes:

    check = EditCheck.judge(tasks, old_won, new_won, margin, wall_s)
    check.rolled_back          # new success < old success - margin
    record = check.annotate(cycle_record, kept_hash)   # the history.jsonl line says so

A cycle that changes nothing the policy can see (`visible_entries` equal: e.g. only skips,
usage counts or a failed consolidator) is not played (`EditCheck.unplayed`): both banks
would give the same episodes. A rolled-back cycle leaves the bank exactly as it was before
the cycle (same content hash): its edits, and the batch's usage counts and evidence
statistics, are dropped together.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional, Sequence

from evoharness_rl.experience.retrieval import SnapshotEntry

TOLERANCE = 1e-9  # success rates are ratios of small counts: a tie must not read as a drop


def visible_entries(bank: Any) -> tuple[SnapshotEntry, ...]:
    """What an episode can see of `bank`: its active entries as a snapshot renders and indexes them."""
    return tuple(SnapshotEntry.of(e) for e in bank.active())


def changes_what_the_policy_sees(before: Any, after: Any) -> bool:
    return visible_entries(before) != visible_entries(after)


@dataclass(frozen=True)
class EditCheck:
    """The outcome of one cycle's check (success rates over the held-out tasks that played without error)."""

    tasks: int  # held-out tasks played with each bank (0: the check did not play)
    margin: float  # experience.validate_margin
    old_success: Optional[float] = None  # with the bank before the cycle
    new_success: Optional[float] = None  # with the bank the cycle produced
    wall_s: float = 0.0  # seconds the check took (both plays)

    @classmethod
    def judge(cls, tasks: int, old_won: Sequence[bool], new_won: Sequence[bool], margin: float,
              wall_s: float) -> "EditCheck":
        """`old_won` / `new_won`: the outcomes of the episodes of the `tasks` held-out tasks that did not error."""
        if not old_won or not new_won:  # every episode errored: no evidence either way, the cycle stays
            return cls(tasks=tasks, margin=margin, wall_s=wall_s)
        return cls(tasks=tasks, margin=margin, old_success=sum(map(bool, old_won)) / len(old_won),
                   new_success=sum(map(bool, new_won)) / len(new_won), wall_s=wall_s)

    @classmethod
    def unplayed(cls, margin: float) -> "EditCheck":
        return cls(tasks=0, margin=margin)

    @property
    def played(self) -> bool:
        return self.old_success is not None and self.new_success is not None

    @property
    def rolled_back(self) -> bool:
        return self.played and self.new_success < self.old_success - self.margin - TOLERANCE

    def metrics(self) -> dict[str, float]:
        """`experience/validate_*` for metrics.jsonl; the two scores only when the check played."""
        out = {"experience/rolled_back": float(self.rolled_back), "experience/validate_s": self.wall_s,
               "experience/validate_episodes": float(2 * self.tasks)}
        if self.played:
            out["experience/validate_old_success"] = self.old_success
            out["experience/validate_new_success"] = self.new_success
        return out

    def annotate(self, record: dict[str, Any], kept_hash: str) -> dict[str, Any]:
        """The cycle's history.jsonl record with the check; a rolled-back cycle's record says so (status
        `rolled_back`, `bank_after` the bank that stayed, `bank_proposed` the one that did not)."""
        check = {"played": self.played, "tasks": self.tasks, "old_success": self.old_success,
                 "new_success": self.new_success, "margin": self.margin, "rolled_back": self.rolled_back,
                 "wall_s": round(self.wall_s, 4)}
        out = {**record, "edit_check": check}
        if self.rolled_back:
            check["cycle_status"] = record.get("status")
            out.update(status="rolled_back", bank_proposed=record.get("bank_after"), bank_after=kept_hash)
        return out

    def describe(self) -> str:
        if not self.played:
            return "edit check: not played (the cycle changed no entry the policy sees, or every episode errored)"
        verdict = "rolled back" if self.rolled_back else "kept"
        return (f"edit check on {self.tasks} held-out tasks: success {self.old_success:.3f} with the old bank, "
                f"{self.new_success:.3f} with the new one (margin {self.margin}): {verdict} ({self.wall_s:.1f}s)")
