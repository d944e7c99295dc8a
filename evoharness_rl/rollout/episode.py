"""One episode: environment + BPE workspace + prompt building, text in and text out.

The episode is what an environment worker runs. Each turn:

    messages = episode.prompt()            # chat messages for the policy
    ... the rollout engine generates a response for them ...
    episode.step(response)                 # parse -> env step | harness verb | invalid

Every turn costs one step of the shared budget (env, harness and invalid alike); the
episode ends when the environment says done or the budget is spent (truncation, never
a success), or when the rollout engine ends it at its trajectory token cap (`cap`, never a
success either). Token ids are the rollout engine's business; this module sees text only.

Context styles:
- `per_turn`: every prompt is fresh: system + one user message built from the env's
  turn template (objective, latest observation, admissible actions, the last
  `history_length` actions, harness views).
- `accumulated`: one growing conversation: system, the instruction, then one user
  message per turn (observation or harness result, actions, views); `prompt()` returns
  the whole conversation and `new_messages()` the part added since the last response.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Optional

from evoharness_rl.envs.base import Environment, StepResult
from evoharness_rl.harness.protocol import (ActionKind, ParsedAction, compact_system_prompt, format_response,
                                            parse_response)
from evoharness_rl.harness.schedule import REFUSAL, EpisodeSchedule, episode_key, load_schedule
from evoharness_rl.harness.workspace import ExperienceReader, HarnessMode, HarnessSwitches, Workspace
from evoharness_rl.rollout.trajectory import Trajectory, Turn

HISTORY_RESULT_CHARS = 160  # each history line shows this much of the action's result


@dataclass
class EpisodeSettings:
    """Per-episode knobs (filled from the harness/env config by the rollout engine)."""

    mode: str = "adaptive"  # harness mode: env_only | always_on | adaptive
    switches: HarnessSwitches = field(default_factory=HarnessSwitches)
    context: str = "per_turn"  # per_turn | accumulated
    prompt_style: str = "paper"  # paper (the env's system prompts) | compact (a few lines, for small local models)
    prompt_variant: str = "full"  # full | stripped (adaptive: no harness-usage instructions; the verbs stay valid)
    max_steps: int = 50  # shared step budget (env + harness + invalid actions)
    recall_k: int = 3  # entries returned by recall
    progress_capacity: int = 8  # subgoals kept by Progress
    history_length: int = 5  # previous actions shown in a per_turn prompt
    max_actions_shown: int = 60  # admissible actions listed in a prompt (the rest are elided with a count)
    schedule: Optional[str] = None  # schedule ablations: the run's schedule file (harness/schedule.py); None: the
    # policy's own harness calls
    schedule_retries: int = 2  # schedule ablations: refusals of an off-schedule harness call before it is invalid


class Episode:
    def __init__(self, env: Environment, settings: EpisodeSettings, experience: ExperienceReader | None = None):
        self.env = env
        self.settings = settings
        self.experience = experience
        self.spec = env.spec
        self.memory_text = ""  # a memory baseline's prompt context (set at reset)

    # -- lifecycle -----------------------------------------------------------------

    def reset(self, task_id: str, seed: int = 0) -> None:
        s = self.settings
        self.task, first = self.env.reset(task_id, seed)
        # An environment may give a task a tighter budget of its own (Task.info["max_steps"]; the diagnostic tasks do).
        self.max_steps = min(s.max_steps, int(self.task.info.get("max_steps") or s.max_steps))
        self.belief = self.env.make_belief()
        self.belief.reset(self.task, first)
        self.workspace = Workspace(
            HarnessMode(s.mode),
            self.belief,
            self.experience,
            s.switches,
            family=self.task.family,
            objective=self.task.objective,
            recall_k=s.recall_k,
            progress_capacity=s.progress_capacity,
        )
        # A memory baseline (experience/memory.py: ExpeL, ReasoningBank) is read once, at episode start, into the
        # system prompt; the bank of EvoHarness is read through the workspace instead (recall, always_on views).
        context = getattr(self.experience, "prompt_context", None)
        self.memory_text, memory_ids = context(self.task.objective, self.task.family) if context else ("", [])
        self.workspace.recalled_ids.extend(memory_ids)
        self.last_env: StepResult = first
        self.last_result: str = first.observation  # what the previous action returned
        self.done = False
        self.record = Trajectory(
            task_id=self.task.task_id,
            family=self.task.family,
            env=self.spec.name,
            split=self.task.split,
            objective=self.task.objective,
            mode=s.mode,
            context=s.context,
            prompt_version=self.spec.versioned(s.prompt_style),
            seed=seed,
            max_steps=self.max_steps,
        )
        self._conversation: list[dict[str, str]] = []
        self._pending: list[dict[str, str]] = []
        self._history: list[str] = []
        self._last_canonical: str | None = None
        self._teacher = None
        self._slipped = False  # the pending response is a teacher slip (see teacher_response)
        self._current_view = ""
        self.schedule: Optional[EpisodeSchedule] = None
        if s.schedule:
            table = load_schedule(s.schedule)
            key = episode_key(self.task.task_id, seed)
            if key not in table:
                raise KeyError(f"episode {key} has no entry in the schedule {s.schedule}")
            self.schedule = EpisodeSchedule(table[key], s.schedule_retries)
            self.record.scheduled_calls = [[c.step, c.verb, c.arg] for c in table[key]]
        if s.context == "accumulated":
            self._conversation = [
                {"role": "system", "content": self.system_prompt()},
                {"role": "user", "content": self._user_message(first.observation)},
            ]
            self._pending = list(self._conversation)

    def system_prompt(self) -> str:
        adaptive = self.settings.mode == HarnessMode.ADAPTIVE.value
        if self.settings.prompt_variant == "stripped":
            # Stripped instructions (paper Table 9): the environment-only prompt; the harness verbs stay valid actions
            # (the protocol parses them), so a policy that calls them does so without being told how.
            adaptive = False
        if self.settings.prompt_style == "compact":
            verbs = self.workspace.enabled_verbs if adaptive else ()
            prompt = compact_system_prompt(self.spec.action_format, self.spec.actions_label, verbs)
        else:
            prompt = self.spec.system_prompts["env_only" if self.settings.prompt_variant == "stripped"
                                              else self.settings.mode]
        if adaptive and self.settings.prompt_style != "compact":
            disabled = [v for v in ("track", "commit", "recall", "note") if v not in self.workspace.enabled_verbs]
            if disabled:
                prompt += "\n\nNot available in this run (using them is invalid): " + ", ".join(disabled) + "."
        return prompt + (f"\n\n{self.memory_text}" if self.memory_text else "")

    # -- prompts ---------------------------------------------------------------------

    def _actions_text(self) -> str:
        actions = self.last_env.admissible_actions
        cap = self.settings.max_actions_shown
        shown = ", ".join(actions[:cap])
        if len(actions) > cap:
            shown += f", ... ({len(actions) - cap} more)"
        return shown or "(any valid action)"

    def _user_message(self, observation: str) -> str:
        self._current_view = self.workspace.render_views()
        history = "\n".join(self._history[-self.settings.history_length :]) or "(none)"
        return self.spec.turn_template.format(
            objective=self.task.objective,
            observation=observation,
            actions=self._actions_text(),
            history=history,
            harness_views=self._current_view,
        ).rstrip()

    def prompt(self) -> list[dict[str, str]]:
        """Chat messages for the next policy call."""
        if self.settings.context == "accumulated":
            return list(self._conversation)
        return [
            {"role": "system", "content": self.system_prompt()},
            {"role": "user", "content": self._user_message(self.last_env.observation)},
        ]

    def new_messages(self) -> list[dict[str, str]]:
        """Accumulated context: the messages added since the last response."""
        return list(self._pending)

    # -- acting ------------------------------------------------------------------------

    def step(self, response: str, turn: Turn | None = None) -> Turn:
        """Apply one response; returns the completed Turn (also appended to the record)."""
        if self.done:
            raise RuntimeError("step() called on a finished episode; call reset() first")
        s = self.settings
        messages = self.prompt() if s.context == "per_turn" else self.new_messages()
        view = self._current_view
        parsed = parse_response(response, self.spec.action_format, self.workspace.enabled_verbs)
        rec = self.record
        parsed, marker = self._scheduled(parsed)
        if marker == "refused":
            return self._refused(response, parsed, messages, view, turn)
        result, parsed = self._apply(parsed)
        canonical = parsed.canonical
        repeated = parsed.kind is not ActionKind.INVALID and bool(self._history) and self._last_canonical == canonical
        self._last_canonical = canonical if parsed.kind is not ActionKind.INVALID else None
        rec.steps += 1
        rec.invalid_count += parsed.kind is ActionKind.INVALID
        rec.repeat_count += repeated
        if parsed.kind is ActionKind.HARNESS:
            rec.harness_calls[parsed.verb] = rec.harness_calls.get(parsed.verb, 0) + 1
        turn = turn or Turn(index=len(rec.turns), messages=[], response="", action_kind="", action="")
        turn.index, turn.messages, turn.response = len(rec.turns), messages, response
        turn.action_kind, turn.action, turn.verb = parsed.kind.value, parsed.action, parsed.verb
        turn.invalid_reason, turn.observation, turn.harness_view, turn.repeated = parsed.reason, result, view, repeated
        turn.belief, turn.progress, turn.schedule = *self.workspace.state(), marker
        rec.turns.append(turn)
        self._history.append(f"{len(self._history) + 1}. {canonical} -> {_short(result)}")
        if self.last_env.done or rec.steps >= self.max_steps:
            self._finish(truncated=not self.last_env.done)
        elif s.context == "accumulated":
            self._pending = [{"role": "assistant", "content": response}, {"role": "user", "content": self._user_message(result)}]
            self._conversation.extend(self._pending)
        # A rejected slip left the teacher's state as it was; an injected call was not the teacher's move.
        if self._teacher is not None and not self._slipped and not marker:
            self._teacher.observe(parsed.kind.value, parsed.action, result)
        self._slipped = False
        return turn

    # -- schedule ablations (harness/schedule.py: the design decisions) ------------------------

    def _scheduled(self, parsed: ParsedAction) -> tuple[ParsedAction, str]:
        """The action this step takes under the schedule, and the turn's `schedule` marker."""
        if self.schedule is None:
            return parsed, ""
        call = self.schedule.call_at(self.record.steps)
        if call is not None:  # the schedule's call replaces whatever the policy answered
            return ParsedAction(ActionKind.HARNESS, action=call.arg, verb=call.verb), "injected"
        if parsed.kind is not ActionKind.HARNESS:
            return parsed, ""
        if self.schedule.refuse(self.record.steps):
            return parsed, "refused"
        return ParsedAction(ActionKind.INVALID, action=parsed.canonical, reason=REFUSAL, think=parsed.think), ""

    def _refused(self, response: str, parsed: ParsedAction, messages: list, view: str, turn: Turn | None) -> Turn:
        """Record a refused harness call: no step, no action; the refusal is the feedback of the next prompt."""
        rec = self.record
        rec.refused_calls += 1
        feedback = f"Refused: {REFUSAL}."
        turn = turn or Turn(index=0, messages=[], response="", action_kind="", action="")
        turn.index, turn.messages, turn.response = len(rec.turns), messages, response
        # Recorded as an invalid turn (never counted as a harness call anywhere), marked and not counted as a step.
        turn.action_kind, turn.action, turn.verb = ActionKind.INVALID.value, parsed.canonical, parsed.verb
        turn.invalid_reason, turn.observation, turn.harness_view, turn.schedule = REFUSAL, feedback, view, "refused"
        turn.belief, turn.progress = self.workspace.state()
        rec.turns.append(turn)
        self._history.append(f"{len(self._history) + 1}. {parsed.canonical} -> {feedback}")
        if self.settings.context == "accumulated":
            self._pending = [{"role": "assistant", "content": response},
                             {"role": "user", "content": self._user_message(feedback)}]
            self._conversation.extend(self._pending)
        return turn

    def _apply(self, parsed: ParsedAction) -> tuple[str, ParsedAction]:
        if parsed.kind is ActionKind.INVALID:
            return f"Invalid action: {parsed.reason}", parsed
        if parsed.kind is ActionKind.HARNESS:
            return self.workspace.execute(parsed), parsed
        result = self.env.step(parsed.action)
        self.last_env = result
        self.belief.update(parsed.action, result)
        self.workspace.after_env_step()
        if result.invalid:
            reason = result.info.get("reason") or f"'{parsed.action}' is not an available action"
            parsed = ParsedAction(ActionKind.INVALID, action=parsed.action, reason=reason, think=parsed.think)
        return result.observation, parsed

    def _finish(self, truncated: bool) -> None:
        rec = self.record
        self.done = True
        rec.won = bool(self.last_env.won) and not truncated
        rec.score = float(self.last_env.score)
        rec.truncated = truncated and not self.last_env.done
        rec.notes = list(self.workspace.notes)
        rec.recalled_ids = list(self.workspace.recalled_ids)

    def cap(self) -> None:
        """End the episode at the rollout engine's trajectory token cap: a failure (flagged), not an error."""
        self._finish(truncated=False)
        self.record.won = False
        self.record.token_capped = True

    def fail(self, error: str) -> None:
        """Mark the episode as failed by infrastructure (not a policy failure)."""
        self.done = True
        self.record.error = error

    # -- teacher -------------------------------------------------------------------------

    def teacher_response(self, harness_rate: float, rng: random.Random, slip_rate: float = 0.0) -> str:
        """The scripted expert's next response (the `scripted` policy).

        With probability `slip_rate` it is instead one of the teacher's plausible mistakes
        that the environment rejects (`Teacher.slips`), when there is one.
        """
        if self._teacher is None:
            self._teacher = self.env.make_teacher(self.workspace.enabled_verbs, harness_rate, rng)
        if slip_rate > 0 and rng.random() < slip_rate:
            admissible = set(self.last_env.admissible_actions)
            options = [s for s in self._teacher.slips() if admissible and s[1] not in admissible]
            if options:
                self._slipped = True
                return format_response(self.spec.action_format, *rng.choice(options))
        return self._teacher.respond()


def _short(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= HISTORY_RESULT_CHARS else text[: HISTORY_RESULT_CHARS - 3] + "..."
