"""One consolidation: a batch of trajectories in, checked bank edits applied, a report out.

    report = consolidate(bank, trajectories, consolidator, update_index=u)

1. Evidence: the batch's trajectories in a canonical order (family, task id, seed, content
   digest) so the result never depends on which worker finished first; episodes that
   failed for infrastructure reasons (`error` set) are left out.
2. Usage: every entry id in the trajectories' `recalled_ids` adds to that entry's usage
   count, and the episode's outcome to its recall outcomes (sums: order-independent).
3. The consolidator (LLM or heuristic) proposes operations (Add/Update/Archive/Skip); it
   never edits the bank.
4. The bank checks and applies them in order and enforces capacity (deterministic code).
   Invalid operations are rejected and listed; a consolidator that fails (no parsable
   output, backend down, an exception) leaves the bank unchanged and is counted.
5. The cycle is appended to the bank's `ops_history` (Table 4, right).
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import time
from dataclasses import dataclass, field
from typing import Any, Iterable, Protocol

from evoharness_rl.experience.bank import ExperienceBank
from evoharness_rl.experience.operations import OPS, OpLimits, Operation
from evoharness_rl.engines.openai import ServerUnresponsive
from evoharness_rl.rollout.trajectory import Trajectory

LOG = logging.getLogger(__name__)
MAX_PARSE_CHARS = 200_000  # only the end of a longer response is searched for the final JSON
MAX_JSON_CANDIDATES = 256  # balanced spans tried (from the end) before giving up


# ---------------------------------------------------------------------------- evidence


def canonical_key(traj: Trajectory) -> tuple:
    """Sort key that makes a batch's order independent of worker timing.

    The digest covers what an episode did (texts, outcome, notes, recalls), not its token
    ids or wall time: cheap for long per-turn prompts, and equal episodes sort together.
    """
    parts = [traj.task_id, traj.family, str(traj.seed), traj.objective, str(traj.won), str(traj.score),
             str(traj.steps), str(traj.truncated), traj.error or "", json.dumps(traj.notes), json.dumps(traj.recalled_ids)]
    for turn in traj.turns:
        parts += [turn.response, turn.action_kind, turn.action, turn.verb or "", turn.observation]
    digest = hashlib.sha1("\x1f".join(parts).encode("utf-8", "surrogatepass")).hexdigest()
    return (traj.family, traj.task_id, traj.seed, digest)


@dataclass(frozen=True)
class Evidence:
    """The trajectories of one batch, canonically ordered, plus how to cite them."""

    episodes: tuple[Trajectory, ...]  # canonical order; infrastructure failures removed
    update_index: int  # the consolidation these episodes feed
    errored: int = 0  # episodes left out because infrastructure failed them

    @classmethod
    def from_trajectories(cls, trajectories: Iterable[Trajectory], update_index: int) -> "Evidence":
        trajectories = list(trajectories)
        kept = sorted((t for t in trajectories if t.error is None), key=canonical_key)
        return cls(tuple(kept), update_index, len(trajectories) - len(kept))

    @property
    def families(self) -> tuple[str, ...]:
        return tuple(sorted({t.family for t in self.episodes}))

    def of_family(self, family: str) -> list[tuple[int, Trajectory]]:
        """(position in the batch, episode) of one family."""
        return [(i, t) for i, t in enumerate(self.episodes) if t.family == family]

    def ref(self, position: int) -> str:
        """Stable evidence reference of the episode at `position` (kept in entries' evidence)."""
        return f"u{self.update_index}/e{position}:{self.episodes[position].task_id}"

    def note_ref(self, position: int, note: int) -> str:
        return f"{self.ref(position)}#note{note}"


# ------------------------------------------------------------------------ consolidators


@dataclass
class Proposal:
    """What a consolidator suggests for one batch."""

    operations: list[Operation] = field(default_factory=list)  # applied in this order
    statistics: dict[str, dict[str, int]] = field(default_factory=dict)  # evidence counters to add to the bank
    failures: list[str] = field(default_factory=list)  # stages that produced nothing usable, and why
    rejected: list[str] = field(default_factory=list)  # proposed operations that could not even be read
    warnings: list[str] = field(default_factory=list)  # tolerated problems (e.g. unknown evidence refs dropped)
    calls: int = 0  # LLM calls made
    episodes_seen: int | None = None  # episodes the consolidator read (None: all of them, e.g. the heuristic)
    prompt_chars: int = 0  # characters of the prompts sent
    prompt_tokens: int = 0  # prompt tokens the endpoint reported (calls that reported them)
    completion_tokens: int = 0  # completion tokens the endpoint reported
    token_counted_calls: int = 0  # calls whose tokens were reported (a text-only callable reports none)


class Consolidator(Protocol):
    name: str  # recorded as the source of every edit

    def propose(self, bank: ExperienceBank, evidence: Evidence) -> Proposal:
        """Suggest operations for `bank` from `evidence`; must not modify the bank."""
        ...


class NoConsolidation:
    """`experience.consolidator=none`: the bank keeps its entries (usage is still counted); no episode is read."""

    name = "none"

    def propose(self, bank: ExperienceBank, evidence: Evidence) -> Proposal:
        return Proposal(episodes_seen=0)


# ------------------------------------------------------------------------------ report


@dataclass
class ConsolidationReport:
    update_index: int  # the consolidation's update index (the bank's cycle number after it)
    source: str  # consolidator name
    episodes: int  # episodes used as evidence (episodes_in_batch)
    errored_episodes: int  # episodes left out (infrastructure failures)
    families: list[str]  # task families in the batch
    ops: dict[str, int]  # applied operations by type (add / update / archive / skip)
    pruned: int  # entries archived by the capacity limit
    failures: list[str]  # consolidator stages that failed (bank unchanged by them)
    rejected: list[str]  # proposed operations refused by validation
    warnings: list[str]  # tolerated problems
    llm_calls: int  # LLM calls made
    recalls: int  # entry retrievals counted from the batch
    composition: dict[str, int]  # active entries after the cycle: general / task / mistakes / search
    bank_hash: str  # content hash after the cycle
    wall_s: float  # seconds spent
    chosen: dict[str, int] = field(default_factory=dict)  # operations the consolidator chose, by type (Fig. 5)
    redirected: dict[str, int] = field(default_factory=dict)  # valid operations the bank turned into others
    episodes_seen: int = 0  # episodes the consolidator read (== episodes for every consolidator but `none`)
    prompt_chars: int = 0  # LLM consolidation: characters of the prompts sent
    prompt_tokens: int = 0  # prompt tokens the endpoint reported
    completion_tokens: int = 0  # completion tokens the endpoint reported
    bank_before: str = ""  # content hash of the bank the batch was collected with (its trajectories' bank_version)
    operations: list[dict[str, Any]] = field(default_factory=list)  # each operation: chosen, result, entry, evidence

    @property
    def failure_count(self) -> int:
        return len(self.failures) + len(self.rejected)

    @property
    def status(self) -> str:
        """ok | partial (some stage or operation failed, others applied) | failed (problems and no edit applied)."""
        if not self.failure_count:
            return "ok"
        edited = sum(n for op, n in self.ops.items() if op != "skip")
        return "partial" if edited else "failed"

    def to_dict(self) -> dict[str, Any]:
        return {**self.__dict__, "status": self.status}

    def metrics(self) -> dict[str, float]:
        """Flat numbers for `RunLogger.metrics`: the consolidator's choices (`chosen/`), what the bank applied
        (`applied/`) and what it redirected (`redirected/`) are separate series."""
        out = {f"experience/chosen/{op}": float(self.chosen.get(op, 0)) for op in OPS}
        out.update({f"experience/applied/{op}": float(n) for op, n in self.ops.items()})
        out.update({f"experience/redirected/{kind}": float(n) for kind, n in self.redirected.items()})
        out.update({f"experience/active_{kind}": float(n) for kind, n in self.composition.items()})
        out.update({
            "experience/episodes_in_batch": float(self.episodes),
            "experience/episodes_seen": float(self.episodes_seen),
            "experience/pruned": float(self.pruned),
            "experience/failures": float(len(self.failures)),
            "experience/rejected_ops": float(len(self.rejected)),
            "experience/failed": float(self.status == "failed"),
            "experience/llm_calls": float(self.llm_calls),
            "experience/prompt_chars": float(self.prompt_chars),
            "experience/prompt_tokens": float(self.prompt_tokens),
            "experience/completion_tokens": float(self.completion_tokens),
            "experience/recalls": float(self.recalls),
            "experience/consolidation_s": self.wall_s,
        })
        return out

    def history_record(self) -> dict[str, Any]:
        """The compact record kept in the bank's append-only `ops_history`."""
        return {
            "update": self.update_index, "source": self.source, "episodes": self.episodes,
            "families": self.families, "ops": self.ops, "chosen": self.chosen, "redirected": self.redirected,
            "pruned": self.pruned, "failures": self.failure_count, "composition": self.composition,
        }

    def cycle_record(self, **context: Any) -> dict[str, Any]:
        """The full record of the cycle for `history.jsonl` (see experience/history.py); `context`: e.g. the
        GRPO update whose batch it read."""
        return {
            "cycle": self.update_index, **context, "status": self.status, "source": self.source,
            "bank_before": self.bank_before, "bank_after": self.bank_hash,
            "episodes_in_batch": self.episodes, "episodes_seen": self.episodes_seen,
            "errored_episodes": self.errored_episodes, "families": self.families,
            "chosen": self.chosen, "applied": self.ops, "redirected": self.redirected, "pruned": self.pruned,
            "operations": self.operations, "failures": self.failures, "rejected": self.rejected,
            "llm_calls": self.llm_calls, "prompt_chars": self.prompt_chars, "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens, "wall_s": self.wall_s,
        }


def consolidate(
    bank: ExperienceBank,
    trajectories: Iterable[Trajectory],
    consolidator: Consolidator,
    update_index: int | None = None,
    limits: OpLimits | None = None,
    log: Any = None,
) -> ConsolidationReport:
    """Run one consolidation cycle on `bank` (in memory; the caller saves it).

    `update_index` (e.g. GRPO's policy update u) must be larger than that of the bank's last
    consolidation (default: the bank's + 1); refusing a smaller one keeps a resumed run
    from applying the same batch twice.
    """
    start = time.perf_counter()
    u = bank.update_index + 1 if update_index is None else int(update_index)
    if u < 0 or (bank.ops_history and u <= bank.update_index):
        raise ValueError(f"update_index={u} is not after the bank's last consolidation ({bank.update_index})")
    before = bank.content_hash()
    trajectories = list(trajectories)
    evidence = Evidence.from_trajectories(trajectories, u)
    bank.update_index = u
    recalls = sum(bank.record_usage(trajectories).values())
    proposal = _propose(consolidator, bank, evidence)
    result = bank.apply(proposal.operations, consolidator.name, limits)
    bank.merge_statistics(proposal.statistics)
    chosen = {op: sum(o.op == op for o in proposal.operations) for op in OPS}
    seen = len(evidence.episodes) if proposal.episodes_seen is None else proposal.episodes_seen
    report = ConsolidationReport(
        update_index=u, source=consolidator.name, episodes=len(evidence.episodes), errored_episodes=evidence.errored,
        families=list(evidence.families), ops=result.counts, pruned=result.pruned, failures=proposal.failures,
        rejected=proposal.rejected + result.rejected, warnings=proposal.warnings + _dropped_warning(result, bank),
        llm_calls=proposal.calls, recalls=recalls,
        composition=bank.composition(), bank_hash="", wall_s=0.0, chosen=chosen, redirected=result.redirected,
        episodes_seen=seen, prompt_chars=proposal.prompt_chars, prompt_tokens=proposal.prompt_tokens,
        completion_tokens=proposal.completion_tokens, bank_before=before,
        operations=result.outcomes + [{"op": "?", "result": "rejected", "error": r} for r in proposal.rejected],
    )
    bank.ops_history.append(report.history_record())
    report.bank_hash = bank.content_hash()
    report.wall_s = round(time.perf_counter() - start, 4)
    _log(report, log)
    return report


def _propose(consolidator: Consolidator, bank: ExperienceBank, evidence: Evidence) -> Proposal:
    if not evidence.episodes:
        return Proposal()
    try:
        return consolidator.propose(bank, evidence)
    except ServerUnresponsive:  # a consolidator server that answers nothing: the run ends with its one line
        raise
    except Exception as err:  # a consolidator bug or a dead backend must not take training down
        LOG.exception("consolidator %s failed", consolidator.name)
        return Proposal(failures=[f"{consolidator.name} consolidator raised {type(err).__name__}: {err}"[:500]],
                        episodes_seen=0)


def _dropped_warning(result: Any, bank: ExperienceBank) -> list[str]:
    if not result.dropped:
        return []
    kept = bank.ARCHIVE_PER_CATEGORY * bank.capacity
    return [f"{result.dropped} archived entries removed from the bank: a category keeps at most {kept} archived "
            "entries (the least recently changed go; `bank diff` against an older bank file shows them)"]


def _same_failures_once(failures: list[str]) -> list[str]:
    """Failures told once per distinct reason: every stage of a cycle against a server that answers HTTP 500 fails
    the same way, and one line says so ("4 stages: the consolidator call failed: ... (HTTP 500) ...")."""
    reasons: dict[str, list[str]] = {}
    for failure in failures:
        stage, _, reason = failure.partition(": ")
        reasons.setdefault(reason or failure, []).append(stage)
    return [f"{stages[0]}: {reason}" if len(stages) == 1 else f"{len(stages)} stages ({', '.join(stages)}): {reason}"
            for reason, stages in reasons.items()]


def _log(report: ConsolidationReport, log: Any) -> None:
    ops = ", ".join(f"{op} {report.ops.get(op, 0)}" for op in OPS)
    redirected = ", ".join(f"{k} {n}" for k, n in report.redirected.items() if n) or "none"
    line = (f"consolidation u={report.update_index} ({report.source}, {report.episodes_seen}/{report.episodes} episodes "
            f"read) {report.status}: {ops} applied (redirected by the bank: {redirected}), "
            f"pruned {report.pruned}, failures {len(report.failures)}, rejected ops {len(report.rejected)}")
    problems = _same_failures_once(report.failures) + report.rejected
    dropped = [w for w in report.warnings if "archived entries removed" in w]
    if log is not None:
        for warning in dropped:
            (getattr(log, "warning", None) or log.info)(f"consolidation: {warning}")
        log.info(line)
        for problem in problems[:20]:
            (getattr(log, "warning", None) or log.info)(f"consolidation problem: {problem}")
    else:
        LOG.info(line)
        for warning in dropped:
            LOG.warning("consolidation: %s", warning)
        for problem in problems[:20]:
            LOG.warning("consolidation problem: %s", problem)


# ------------------------------------------------------------------------- JSON output

_OPEN = {"{": "}", "[": "]"}


def parse_last_json(text: Any) -> Any | None:
    """The last valid JSON object or array in `text` (reasoning may precede it), or None.

    One linear, string-aware pass pairs brackets; the balanced spans are then tried from
    the one ending last. Never raises; linear in the input even for adversarial text.
    """
    if not isinstance(text, str) or not text:
        return None
    text = text[-MAX_PARSE_CHARS:]
    spans = _balanced_spans(text)
    spans.sort(key=lambda span: (-span[1], span[0]))
    for start, end in spans[:MAX_JSON_CANDIDATES]:
        try:
            return json.loads(text[start:end])
        except (ValueError, RecursionError):
            continue
    return None


def json_cut_off(text: str) -> bool:
    """True when `text` ends inside a JSON value that began after the last complete one: the answer was
    cut off (e.g. by max_new_tokens) before its final JSON closed."""
    text = text[-MAX_PARSE_CHARS:]
    stack, spans = _scan(text)
    last_end = max((end for _, end in spans), default=0)
    return any(start >= last_end for start in stack)


def _balanced_spans(text: str) -> list[tuple[int, int]]:
    return _scan(text)[1]


def _scan(text: str) -> tuple[list[int], list[tuple[int, int]]]:
    """(positions of the brackets still open at the end, balanced spans)."""
    spans: list[tuple[int, int]] = []
    stack: list[int] = []
    in_string = escaped = False
    for i, ch in enumerate(text):
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
            continue
        if ch == '"' and stack:
            in_string = True
        elif ch in _OPEN:
            stack.append(i)
        elif ch in "}]":
            if stack and _OPEN[text[stack[-1]]] == ch:
                spans.append((stack.pop(), i + 1))
            else:
                stack.clear()  # a stray closer: whatever was open is not JSON
    return stack, spans


_WS = re.compile(r"\s+")


def one_line(text: str, limit: int) -> str:
    """`text` on one line, cut to `limit` characters."""
    text = _WS.sub(" ", text or "").strip()
    return text if len(text) <= limit else text[: limit - 3] + "..."
