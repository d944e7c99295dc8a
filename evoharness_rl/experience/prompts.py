"""The consolidation prompts (paper Appendix L.2) and how evidence is rendered into them.

Three calls per batch, all with the same system message:
  task-specific abstraction (once per task family in the batch)  -> candidate skills / mistakes / search priorities
  general abstraction (once over the pooled batch, >= 2 families) -> general candidate skills / mistakes
  reconciliation (global for general candidates, local per family) -> Add / Update / Archive / Skip operations
or one fused call that abstracts and reconciles at once (`experience.fused=true`).

Every template ends with the exact JSON shape expected, since the parser only reads the
last JSON value of the response. Episodes are cited as E1, E2, ... and notes as N1, N2, ...
in the batch's canonical order; the consolidator maps them back to stable references.
"""

from __future__ import annotations

from dataclasses import dataclass

from evoharness_rl.experience.consolidation import Evidence, one_line
from evoharness_rl.rollout.trajectory import Trajectory

SYSTEM = (
    "You are a helpful assistant. Reasoning may precede the FINAL output. The FINAL output format is a single "
    "valid JSON value, with no prose or markdown fences."
)

# The evidence block every abstraction prompt shows (paper Appendix L.2).
EVIDENCE = """SUCCESSFUL EPISODES:
{success_data}

FAILED EPISODES:
{failure_data}

AGENT NOTES:
{notes_text}
"""

TASK_ABSTRACTION = """You are the task-experience abstractor for {agent_description}. You are given the episodes produced for one {task_noun}. The output is candidate Experience distilled from this evidence alone; the store remains unchanged.

{task_label}: {task_type}

""" + EVIDENCE + """
Return a JSON object containing candidate skills, mistakes, and search priorities. Each candidate contains a unique ID, a short actionable principle, its trigger condition, and supporting evidence. Candidates are specific to {task_type}; a compact set of high-value entries is preferred, with empty lists representing a lack of supported candidates.

FINAL JSON FORMAT (every text field at most {max_field_chars} characters; evidence cites the E#/N# labels above):
{{"skills": [{{"id": "s1", "principle": "...", "trigger": "...", "evidence": ["E1"]}}],
 "mistakes": [{{"id": "m1", "principle": "...", "trigger": "...", "how_to_avoid": "...", "evidence": ["E2", "N1"]}}],
 "search_priorities": [{{"object": "...", "locations": ["most likely", "next"], "evidence": ["E1"]}}]}}"""

GENERAL_ABSTRACTION = """You are the general-experience abstractor for {agent_description}. You are given episodes produced across several {task_noun}s. The output is candidate Experience that transfers across them; the store remains unchanged.

{task_label}S PRESENT IN THIS BATCH: {task_type_list}

""" + EVIDENCE + """
Return a JSON object containing general candidate skills and mistakes. Retain a candidate only when at least two task types support it, name those task types, and cite the supporting trajectories or notes. Omit task-specific observations and search priorities. Prefer a few short, high-value candidates, and return empty lists when appropriate.

FINAL JSON FORMAT (every text field at most {max_field_chars} characters; task_types from the list above):
{{"skills": [{{"id": "g1", "principle": "...", "trigger": "...", "task_types": ["...", "..."], "evidence": ["E1", "E4"]}}],
 "mistakes": [{{"id": "gm1", "principle": "...", "trigger": "...", "how_to_avoid": "...", "task_types": ["...", "..."], "evidence": ["E2"]}}]}}"""

RECONCILIATION = """You are the reconciler for {agent_description}'s experience store. You are given candidates distilled from the latest rollout batch and the frozen store. The output represents incremental edits that fold supported candidates into the store rather than restating the full store.

STAGE: {stage}
{stage_rules}

CANDIDATE SKILLS:
{candidate_skills}

CANDIDATE MISTAKES:
{candidate_mistakes}

CANDIDATE SEARCH PRIORITIES:
{candidate_search_priorities}

EXISTING SKILLS:
{existing_skills}

EXISTING MISTAKES:
{existing_mistakes}

Return a JSON object containing Experience operations and supported search priorities. Each candidate maps to one of Add, Update, Archive, or Skip. Skip represents a redundant candidate, Update a refinement or correction, Archive an entry that is misleading beyond repair, and Add genuinely new Experience. Update and archive operations reference existing IDs; evidence references come from the provided inputs, and fields are short.

FINAL JSON FORMAT (every text field at most {max_field_chars} characters):
{{"operations": [
  {{"op": "add", "category": "{add_categories}", "principle": "...", "trigger": "...", "how_to_avoid": "...", "task_types": [], "evidence": ["E1"]}},
  {{"op": "update", "id": "<existing id>", "principle": "...", "trigger": "...", "evidence": ["E2"]}},
  {{"op": "archive", "id": "<existing id>", "reason": "..."}},
  {{"op": "skip", "candidate": "<candidate id>", "reason": "..."}}],
 "search_priorities": [{{"object": "...", "locations": ["most likely", "next"], "evidence": ["E1"]}}]}}"""

GLOBAL_RULES = (
    "Global reconciliation: edit general Experience only. Add operations use category \"general\" (skills) or "
    "\"mistakes\" (mistakes common to every {task_noun}) and copy the candidate's task_types (at least two). "
    "Update or archive only ids listed under EXISTING. Return an empty search_priorities list."
)
LOCAL_RULES = (
    "Local reconciliation for the {task_noun} {family}: add operations use category \"task\" (skills of this "
    "{task_noun}) or \"mistakes\" (mistakes of this {task_noun}). Update or archive only ids listed under "
    "EXISTING. Put supported search priorities under search_priorities."
)

FUSED = """You are the experience evolver for {agent_description}. You are given the episodes of the latest rollout batch (several {task_noun}s) and the frozen experience store. Abstract reusable Experience from this evidence and fold it into the store as incremental edits: task-specific skills and mistakes for each {task_noun}, general skills and mistakes supported by at least two {task_noun}s, and search priorities.

{task_label}S PRESENT IN THIS BATCH: {task_type_list}

""" + EVIDENCE + """
EXISTING STORE:
{existing_store}

Each candidate maps to one of Add, Update, Archive, or Skip. Skip represents a redundant candidate, Update a refinement or correction, Archive an entry that is misleading beyond repair, and Add genuinely new Experience. Update and archive operations reference existing IDs; evidence references come from the provided inputs, and fields are short. General entries (category "general", or "mistakes" without a family) name at least two supporting task_types.

FINAL JSON FORMAT (every text field at most {max_field_chars} characters):
{{"operations": [
  {{"op": "add", "category": "general", "principle": "...", "trigger": "...", "task_types": ["...", "..."], "evidence": ["E1", "E3"]}},
  {{"op": "add", "category": "task", "family": "<one of the {task_noun}s above>", "principle": "...", "trigger": "...", "evidence": ["E2"]}},
  {{"op": "add", "category": "mistakes", "family": "<a {task_noun}, or empty for all>", "principle": "...", "how_to_avoid": "...", "task_types": [], "evidence": ["N1"]}},
  {{"op": "update", "id": "<existing id>", "principle": "...", "evidence": ["E2"]}},
  {{"op": "archive", "id": "<existing id>", "reason": "..."}},
  {{"op": "skip", "reason": "..."}}],
 "search_priorities": [{{"object": "...", "locations": ["most likely", "next"], "evidence": ["E1"]}}]}}"""

ACTION_CHARS = 80  # one action in an episode rendering
RESULT_CHARS = 120  # one observation / harness result
EPISODE_CHARS = 1_500  # one whole episode
NOTE_CHARS = 300  # one note


@dataclass
class EvidenceView:
    """Episode and note labels (E#, N#) for one batch, and bounded text renderings."""

    evidence: Evidence
    budget_chars: int = 24_000  # episodes + notes text per prompt

    def __post_init__(self) -> None:
        self.labels: dict[str, str] = {}
        self.note_labels: dict[tuple[int, int], str] = {}
        for position, traj in enumerate(self.evidence.episodes):
            self.labels[f"E{position + 1}"] = self.evidence.ref(position)
            for k in range(len(traj.notes)):
                label = f"N{len(self.note_labels) + 1}"
                self.note_labels[(position, k)] = label
                self.labels[label] = self.evidence.note_ref(position, k)

    def resolve(self, label: str) -> str | None:
        """Stable reference for an E#/N# label, or None if the prompt never showed it."""
        return self.labels.get(label.strip().upper()) if isinstance(label, str) else None

    def episodes(self, positions: list[int], won: bool) -> str:
        chosen = [p for p in positions if self.evidence.episodes[p].won == won]
        return _fit([self.render_episode(p) for p in chosen], self.budget_chars // 3, "episodes")

    def notes(self, positions: list[int]) -> str:
        lines = []
        for p in positions:
            traj = self.evidence.episodes[p]
            outcome = "SUCCESS" if traj.won else "FAILURE"
            for k, note in enumerate(traj.notes):
                lines.append(f"[{self.note_labels[(p, k)]}] (E{p + 1}, {outcome}) {one_line(note, NOTE_CHARS)}")
        return _fit(lines, self.budget_chars // 3, "notes")

    def render_episode(self, position: int) -> str:
        traj: Trajectory = self.evidence.episodes[position]
        outcome = "SUCCESS" if traj.won else ("OUT OF STEPS" if traj.truncated else "FAILURE")
        score = f", score {traj.score:.2f}" if 0.0 < traj.score < 1.0 else ""
        head = (f"[E{position + 1}] {traj.family} | {outcome}{score} in {traj.steps} steps (invalid {traj.invalid_count}, "
                f"repeats {traj.repeat_count}) | recalled: {', '.join(sorted(set(traj.recalled_ids))) or 'none'}")
        lines = [head, f"objective: {one_line(traj.objective, 300)}"]
        for turn in traj.turns:
            action = f"{turn.verb} [{turn.action}]" if turn.verb else (turn.action or "<no action>")
            result = turn.invalid_reason if turn.action_kind == "invalid" else turn.observation
            lines.append(f"{turn.index + 1}. {one_line(action, ACTION_CHARS)} -> {one_line(result or '', RESULT_CHARS)}")
        text = "\n".join(lines)
        return text if len(text) <= EPISODE_CHARS else text[: EPISODE_CHARS - 20] + "\n... (cut)"


def _fit(blocks: list[str], budget: int, what: str) -> str:
    """As many blocks as fit in `budget` characters, in order, then a count of the rest."""
    out, used = [], 0
    for i, block in enumerate(blocks):
        if used + len(block) > budget and out:
            out.append(f"... ({len(blocks) - i} more {what} not shown)")
            break
        out.append(block)
        used += len(block) + 1
    return "\n".join(out) if out else "(none)"


def render_candidates(candidates: list[dict]) -> str:
    if not candidates:
        return "(none)"
    lines = []
    for c in candidates:
        if c.get("object"):  # a search priority
            parts = [f"[{c['id']}] {c['object']}: " + ", ".join(c.get("locations", []))]
        else:
            parts = [f"[{c['id']}] {c.get('principle', '')}"]
            parts += [f"{key}: {c[key]}" for key in ("trigger", "how_to_avoid") if c.get(key)]
            if c.get("task_types"):
                parts.append("task_types: " + ", ".join(c["task_types"]))
        if c.get("evidence"):
            parts.append("evidence: " + ", ".join(c["evidence"]))
        lines.append(" | ".join(parts))
    return "\n".join(lines)


def render_existing(entries: list) -> str:
    from evoharness_rl.experience.retrieval import render_entry

    if not entries:
        return "(none)"
    return "\n".join(render_entry(e) + (f" | scope: {e.family}" if e.family else "") for e in entries)


def messages(user: str) -> list[dict[str, str]]:
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": user}]
