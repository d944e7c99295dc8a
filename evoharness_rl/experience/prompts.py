"""The consolidation prompts (paper Appendix L.2) and how evidence is rendered into them.

Three calls per batch, all with the same system message:
  task-specific abstraction (once per task family in the batch)  -> candidate skills / mistakes / search priorities
  general abstraction (once over the pooled batch, >= 2 families) -> general candidate skills / mistakes
  reconciliation (global for general candidates, local per family) -> Add / Update / Archive / Skip operations
or one fused call that abstracts and reconciles at once (`experience.fused=true`).

Every template ends with the exact JSON shape expected, since the parser only reads the
last JSON value of the response. Episodes are cited as E1, E2, ... and notes as N1, N2, ...
in the batch's canonical order; the consolidator maps them back to stable references.

Every episode of the batch is read: each is rendered whole (`render_episode`), and a batch
longer than `experience.max_prompt_chars` is read in parts (`EvidenceView.chunks`), one call
per part, whose proposals a final call reconciles (the staged pipeline's reconciliation
calls; `FUSED_MERGE` for the fused one).
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
EVIDENCE = """{batch_part}SUCCESSFUL EPISODES:
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

# The answer both fused calls (one batch, or the final reconciliation of its parts) end with.
FUSED_FORMAT = """FINAL JSON FORMAT (every text field at most {max_field_chars} characters):
{{"operations": [
  {{"op": "add", "category": "general", "principle": "...", "trigger": "...", "task_types": ["...", "..."], "evidence": ["E1", "E3"]}},
  {{"op": "add", "category": "task", "family": "<one of the {task_noun}s above>", "principle": "...", "trigger": "...", "evidence": ["E2"]}},
  {{"op": "add", "category": "mistakes", "family": "<a {task_noun}, or empty for all>", "principle": "...", "how_to_avoid": "...", "task_types": [], "evidence": ["N1"]}},
  {{"op": "update", "id": "<existing id>", "principle": "...", "evidence": ["E2"]}},
  {{"op": "archive", "id": "<existing id>", "reason": "..."}},
  {{"op": "skip", "reason": "..."}}],
 "search_priorities": [{{"object": "...", "locations": ["most likely", "next"], "evidence": ["E1"]}}]}}"""

FUSED = """You are the experience evolver for {agent_description}. You are given the episodes of the latest rollout batch (several {task_noun}s) and the frozen experience store. Abstract reusable Experience from this evidence and fold it into the store as incremental edits: task-specific skills and mistakes for each {task_noun}, general skills and mistakes supported by at least two {task_noun}s, and search priorities.

{task_label}S PRESENT IN THIS BATCH: {task_type_list}

""" + EVIDENCE + """
EXISTING STORE:
{existing_store}

Each candidate maps to one of Add, Update, Archive, or Skip. Skip represents a redundant candidate, Update a refinement or correction, Archive an entry that is misleading beyond repair, and Add genuinely new Experience. Update and archive operations reference existing IDs; evidence references come from the provided inputs, and fields are short. General entries (category "general", or "mistakes" without a family) name at least two supporting task_types.

""" + FUSED_FORMAT

PART_NOTE = ("BATCH PART {part} OF {parts}: the batch is longer than one prompt, so its episodes are read in {parts} "
             "parts; this part shows {shown} of its {total} episodes, each complete. Cite episodes by their E# labels.\n\n")

FUSED_MERGE = """You are the experience evolver for {agent_description}. The latest rollout batch ({episodes} episodes, {task_noun}s: {task_type_list}) was longer than one prompt, so it was read in {parts} parts; each part proposed edits to the frozen experience store from its own episodes. Reconcile the parts into one set of incremental edits: merge proposals that say the same thing into one (keeping their evidence), prefer what more episodes support when parts disagree, and drop edits that only one episode supports if another part contradicts them.

PROPOSED EDITS (part: operation):
{proposals}

EXISTING STORE:
{existing_store}

Each kept proposal maps to one of Add, Update, Archive, or Skip. Update and archive operations reference existing IDs; evidence references are the E#/N# labels of the proposals; fields are short. General entries (category "general", or "mistakes" without a family) name at least two supporting task_types.

""" + FUSED_FORMAT

ACTION_CHARS = 120  # one action in an episode rendering (longer ones are cut with a marker)
RESULT_CHARS = 160  # one observation / harness result (longer ones are cut with a marker)
NOTE_CHARS = 300  # one note


def cut(text: str, limit: int) -> str:
    """`text` on one line; beyond `limit` characters cut with a marker saying how much was left out."""
    text = one_line(text, 10**9)
    return text if len(text) <= limit else f"{text[:limit]} [...{len(text) - limit} chars cut]"


@dataclass
class EvidenceView:
    """Episode and note labels (E#, N#) for one batch, complete renderings, and chunks that fit a prompt.

    Every episode is rendered whole: each action with its outcome (long observations cut per
    step with a marker; runs of identical steps folded into one line with a count) and always
    the episode's end. A batch whose renderings exceed `budget_chars` is split into chunks
    (`chunks`), each read by its own call; `seen` records every episode shown in a prompt.
    """

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
        self.label_of = {ref: label for label, ref in self.labels.items()}
        self._rendered: dict[int, str] = {}
        self.seen: set[int] = set()  # positions of the episodes some prompt has shown
        self.oversized: list[int] = []  # episodes whose rendering alone exceeds the budget (each its own chunk)

    def resolve(self, label: str) -> str | None:
        """Stable reference for an E#/N# label, or None if the prompt never showed it."""
        return self.labels.get(label.strip().upper()) if isinstance(label, str) else None

    # -- chunks ------------------------------------------------------------------------------

    def size(self, position: int) -> int:
        """Characters episode `position` takes in a prompt (its rendering and its notes)."""
        return len(self.render_episode(position)) + sum(len(n) + 1 for n in self._note_lines(position))

    def chunks(self, positions: list[int]) -> list[list[int]]:
        """`positions` in consecutive groups whose text fits `budget_chars` (an episode never splits)."""
        out: list[list[int]] = [[]]
        used = 0
        for p in positions:
            size = self.size(p)
            if size > self.budget_chars and p not in self.oversized:
                self.oversized.append(p)
            if out[-1] and used + size > self.budget_chars:
                out.append([])
                used = 0
            out[-1].append(p)
            used += size + 1
        return [c for c in out if c]

    def mixed(self, positions: list[int]) -> list[int]:
        """`positions` reordered round-robin over task families, so that every chunk mixes families."""
        by_family: dict[str, list[int]] = {}
        for p in positions:
            by_family.setdefault(self.evidence.episodes[p].family, []).append(p)
        queues = [by_family[f] for f in sorted(by_family)]
        return [q[i] for i in range(max(map(len, queues), default=0)) for q in queues if i < len(q)]

    # -- rendering -----------------------------------------------------------------------------

    def episodes(self, positions: list[int], won: bool) -> str:
        chosen = [p for p in positions if self.evidence.episodes[p].won == won]
        self.seen.update(chosen)
        return "\n".join(self.render_episode(p) for p in chosen) or "(none)"

    def notes(self, positions: list[int]) -> str:
        return "\n".join(line for p in positions for line in self._note_lines(p)) or "(none)"

    def _note_lines(self, position: int) -> list[str]:
        traj = self.evidence.episodes[position]
        outcome = "SUCCESS" if traj.won else "FAILURE"
        return [f"[{self.note_labels[(position, k)]}] (E{position + 1}, {outcome}) {cut(note, NOTE_CHARS)}"
                for k, note in enumerate(traj.notes)]

    def render_episode(self, position: int) -> str:
        if position not in self._rendered:
            self._rendered[position] = render_episode(self.evidence.episodes[position], f"E{position + 1}")
        return self._rendered[position]


def render_episode(traj: Trajectory, label: str) -> str:
    """One episode, complete and compact: header, objective, every step, the end."""
    outcome = "SUCCESS" if traj.won else ("OUT OF STEPS" if traj.truncated else "FAILURE")
    score = f", score {traj.score:.2f}" if 0.0 < traj.score < 1.0 else ""
    head = (f"[{label}] {traj.family} | {outcome}{score} in {traj.steps} steps (invalid {traj.invalid_count}, "
            f"repeats {traj.repeat_count}) | recalled: {', '.join(sorted(set(traj.recalled_ids))) or 'none'}")
    lines = [head, f"objective: {cut(traj.objective, 300)}"]
    steps: list[tuple[str, int, int]] = []  # (text, first turn, last turn): identical consecutive steps folded
    for turn in traj.turns:
        action = f"{turn.verb} [{turn.action}]" if turn.verb else (turn.action or "<no action>")
        result = turn.invalid_reason if turn.action_kind == "invalid" else turn.observation
        text = f"{cut(action, ACTION_CHARS)} -> {cut(result or '', RESULT_CHARS)}"
        if steps and steps[-1][0] == text:
            steps[-1] = (text, steps[-1][1], turn.index + 1)
        else:
            steps.append((text, turn.index + 1, turn.index + 1))
    for text, first, last in steps:
        lines.append(f"{first}. {text}" if first == last else f"{first}-{last}. {text} (the same {last - first + 1} times)")
    lines.append(f"end: {outcome} after {traj.steps} steps")
    return "\n".join(lines)


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


def render_proposals(parts: list[list], view: EvidenceView) -> str:
    """The operations each part proposed, one line each, evidence as the prompt's labels."""
    lines = []
    for k, ops in enumerate(parts):
        for op in ops:
            fields = [f"{name}: {value}" for name, value in op.fields().items() if value]
            scope = " ".join(x for x in (op.id, op.category, op.family and f"family {op.family}") if x)
            if op.task_types:
                fields.append("task_types: " + ", ".join(op.task_types))
            labels = [view.label_of.get(ref, ref) for ref in op.evidence]
            if labels:
                fields.append("evidence: " + ", ".join(labels))
            if op.reason:
                fields.append(f"reason: {op.reason}")
            lines.append(f"part {k + 1}: {op.op} {scope}".rstrip() + (" | " + " | ".join(fields) if fields else ""))
    return "\n".join(lines) or "(none)"


def render_existing(entries: list) -> str:
    from evoharness_rl.experience.retrieval import render_entry

    if not entries:
        return "(none)"
    return "\n".join(render_entry(e) + (f" | scope: {e.family}" if e.family else "") for e in entries)


def messages(user: str) -> list[dict[str, str]]:
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": user}]
