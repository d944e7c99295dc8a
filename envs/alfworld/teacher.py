"""Scripted ALFWorld teacher: solves games with environment actions and, when allowed,
BPE actions interleaved the way the paper's case studies read.

Like ALFWorld's own expert it plans with privileged information (the game's initial
PDDL facts: where every object is), but it *acts* like a searcher: it visits the
receptacles the placement priors (and any recalled hints) rank highest, opens closed
ones, takes the object where it actually sees it, and reacts only to what the engine
answers. A few decoy visits before the true location keep traces realistic; their
number is capped so every episode stays within `SOFT_BUDGET` steps.

BPE use (only the enabled verbs; each call is drawn with probability `harness_rate`
times a per-call weight, so SFT data is not one fixed pattern):

    commit [find mug]                 at the start and at each phase (find, clean, put, use lamp)
    recall [how to do clean task]     procedures; recall [where to find mug] search hints
    track [mug]                       before a second search (pick two) or to check a state
    note [mug found at cabinet 2; recalled hint said countertop]   when a hint was wrong
    note [mug is often found in cabinet]                            a reusable location fact

The script is a generator: each `yield` is one response; `observe` feeds the engine's
answer into the teacher's own Belief before the script resumes.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass, field
from typing import Any, Iterator

from evoharness_rl.envs.alfworld.belief import APPLIANCE, AlfworldBelief, Receptacle, _name_key, goal_from_task
from evoharness_rl.envs.alfworld.rooms import PLACEMENT_PRIORS, object_type
from evoharness_rl.envs.base import StepResult, Task, Teacher
from evoharness_rl.harness.protocol import format_response

SOFT_BUDGET = 40  # the teacher plans to finish within this many steps (eval budget: 50)
MAX_DECOYS = 3  # most receptacles searched in vain before the true one, per search
TASK_NAMES = {"pick_and_place_simple": "pick and place", "look_at_obj_in_light": "look at object in light",
              "pick_clean_then_place_in_recep": "clean", "pick_heat_then_place_in_recep": "heat",
              "pick_cool_then_place_in_recep": "cool", "pick_two_obj_and_place": "pick two"}
PROCEDURES = {
    "clean": "to clean an object, hold it at a sinkbasin and use 'clean X with sinkbasin'",
    "heat": "to heat an object, hold it at the microwave and use 'heat X with microwave'; no need to open it",
    "cool": "to cool an object, hold it at the fridge and use 'cool X with fridge'; never put it inside",
}
Step = tuple[str, str]  # (think, action)


@dataclass
class World:
    """The game's initial state with the engine's display names (privileged; teacher only)."""

    receptacles: dict[str, str] = field(default_factory=dict)  # name -> type ("cabinet 1" -> "cabinet")
    openable: set[str] = field(default_factory=set)  # receptacle names that open
    contents: dict[str, str] = field(default_factory=dict)  # object name -> receptacle name

    @classmethod
    def from_facts(cls, facts: list[Any], infos: dict[str, Any]) -> "World":
        """From the engine's `_facts` (PDDL propositions) and `_entity_infos` (id -> display name)."""

        def name(var: Any) -> str:
            info = infos.get(var.name)
            return (info.name if info is not None and info.name else var.name).strip()

        world = cls()
        # The engine's fact order differs between processes; sort so the teacher's choices
        # (and so a replayed episode) are the same in every worker.
        for fact in sorted(facts, key=str):
            args = fact.arguments
            if fact.name == "receptacletype":
                world.receptacles[name(args[0])] = object_type(name(args[0]))
            elif fact.name == "openable":
                world.openable.add(name(args[0]))
            elif fact.name == "inreceptacle":
                world.contents[name(args[0])] = name(args[1])
        return world

    def of_type(self, kind: str) -> list[str]:
        return sorted((r for r, t in self.receptacles.items() if t == kind), key=_name_key)


class AlfworldTeacher(Teacher):
    """The scripted expert for one ALFWorld episode."""

    def __init__(self, task: Task, world: World, enabled_verbs: tuple[str, ...], harness_rate: float,
                 rng: random.Random):
        self.task, self.world, self.rng = task, world, rng
        self.verbs = set(enabled_verbs)
        self.rate = max(0.0, min(1.0, harness_rate))
        self.goal = goal_from_task(task)
        self.belief = AlfworldBelief()
        self.belief.reset(task, StepResult("", []))
        for recep in world.receptacles:  # the intro lists every receptacle
            self.belief.receptacles[recep] = Receptacle(recep)
        self.steps = 0
        self.failures = 0  # teacher actions the engine rejected (should stay 0)
        self.hints: list[str] = []  # receptacle types a recall suggested
        self.last_result = ""
        self._remaining = self._phase_costs()
        self._script = self._run()

    # -- Teacher API ------------------------------------------------------------------------

    def respond(self) -> str:
        self.steps += 1
        think, action = next(self._script, ("The task should be complete; look around to confirm.", "look"))
        return format_response("tags", think, action)

    def slips(self) -> list[tuple[str, str]]:
        """A small model's typical mistakes here: taking the target where it is not, going to a receptacle
        this room lacks or to where it stands, placing what it does not hold (the episode keeps only those
        the engine rejects, so none of them changes the state)."""
        g, here = self.goal, self.belief.location
        if not here:
            return []
        out = []
        if not self.belief.holding and not self._visible(g.obj):
            out.append((f"There is {g.obj} 1 on the {here}; pick it up.", f"take {g.obj} 1 from {here}"))
        present = set(self.world.receptacles.values())
        absent = [r for r in PLACEMENT_PRIORS.get(g.obj, {}) if r not in present]
        if absent:
            rtype = self.rng.choice(sorted(absent))
            out.append((f"A {g.obj} is usually kept in a {rtype}; check {rtype} 1.", f"go to {rtype} 1"))
        out.append((f"Look for the {g.obj} at {here}.", f"go to {here}"))
        if self.belief.holding and g.recep:
            out.append((f"Put the {self.belief.holding[0]} in the {g.recep}.",
                        f"move {self.belief.holding[0]} to {g.recep} 1"))
        return out

    def observe(self, action_kind: str, action: str, result: str) -> None:
        self.last_result = result
        if action_kind == "invalid":
            self.failures += 1
        elif action_kind == "env":
            self.belief.update(action, StepResult(result, []))

    # -- budget and harness choices ----------------------------------------------------------

    def _phase_costs(self) -> list[int]:
        """Minimal env steps of each remaining phase (search 3, transform 2, place 3, lamp 2)."""
        g = self.goal
        if g.family == "look_at_obj_in_light":
            return [3, 2]
        return [3] + ([2] if g.verb else []) + [3] + ([3, 3] if g.count == 2 else [])

    def _done_phase(self) -> None:
        if self._remaining:
            self._remaining.pop(0)

    def _slack(self) -> int:
        return SOFT_BUDGET - self.steps - sum(self._remaining)

    def _use(self, verb: str, weight: float) -> bool:
        """Whether to spend a step on `verb` now (enabled, budget left, drawn with rate * weight)."""
        return verb in self.verbs and self._slack() > 2 and self.rng.random() < self.rate * weight

    def _say(self, options: tuple[str, ...], **fill: str) -> str:
        return self.rng.choice(options).format(**fill)

    # -- the script ------------------------------------------------------------------------------

    def _run(self) -> Iterator[Step]:
        g = self.goal
        yield from self._opening()
        if g.family == "look_at_obj_in_light":
            obj = yield from self._fetch(g.obj, first=True)
            yield from self._use_lamp(obj)
            return
        dest = self._destination()
        for index in range(g.count):
            obj = yield from self._fetch(g.obj, first=index == 0)
            if g.verb:
                yield from self._transform(obj)
            yield from self._place(obj, dest, last=index == g.count - 1)

    def _opening(self) -> Iterator[Step]:
        g = self.goal
        task_name = TASK_NAMES.get(g.family, g.family)
        if self._use("commit", 1.0):
            first = f"find two {g.obj}" if g.count == 2 else f"find {g.obj}"
            think = self._say(("Register the first subgoal before acting: {s}.",
                               "Decompose the task; the first step is to {s}."), s=first)
            yield think, f"commit [{first}]"
        if self._use("recall", 0.6):
            think = self._say(("Recall the general procedure for a {t} task.",
                               "Check past experience on how {t} tasks go."), t=task_name)
            yield think, f"recall [how to do {task_name} task]"
        if self._use("recall", 0.15):
            yield "Check which mistakes to avoid before starting.", "recall [mistakes to avoid]"

    def _fetch(self, kind: str, first: bool) -> Iterator[Step]:
        """Search for an unplaced `kind`, take it; returns its name."""
        if not first and self._use("commit", 0.7):
            yield f"One {kind} is placed; now find the second one.", f"commit [find second {kind}]"
        if first and self._use("recall", 0.8):
            yield f"Recall where a {kind} is usually found.", f"recall [where to find {kind}]"
            self.hints = self._parse_hints(self.last_result)
        if not first and self._use("track", 0.8):
            yield f"Check what I already know about other {kind}s.", f"track [{kind}]"
        route = self._route(kind)
        prev = ""
        for visited, recep in enumerate(route):
            if self._visible(kind):
                break
            if visited == 2 and self._use("track", 0.5):
                yield f"Two places checked without a {kind}; see what is left to search.", f"track [{kind}]"
            if self.belief.location != recep:
                yield self._search_think(kind, recep, prev), f"go to {recep}"
            prev = recep
            if recep in self.world.openable and self.belief.receptacles[recep].status != "open":
                yield f"The {recep} is closed; open it to look inside.", f"open {recep}"
        obj = self._visible(kind) or self._fallback_instance(kind)
        where = self.belief.location
        yield self._say(("Found {o} here; take it.", "There is {o} on the {r}; pick it up."), o=obj, r=where), \
            f"take {obj} from {where}"
        yield from self._after_found(kind, where)
        self._done_phase()
        return obj

    def _after_found(self, kind: str, where: str) -> Iterator[Step]:
        where_type = object_type(where)
        if self.hints and where_type not in self.hints and self._use("note", 1.5):
            yield (f"The recalled hint ({self.hints[0]}) was wrong here; record the correction.",
                   f"note [{kind} found at {where}; recalled hint said {self.hints[0]}]")
        elif self._use("note", 0.4):
            yield ("Record where this object turned up for future episodes.",
                   f"note [{kind} is often found in {where_type}]")
        self.hints = []

    def _transform(self, obj: str) -> Iterator[Step]:
        g = self.goal
        appliance_kind = APPLIANCE[g.verb]
        appliance = self.world.of_type(appliance_kind)[0]
        if self._use("commit", 0.7):
            yield f"Holding {obj}; next {g.verb} it.", f"commit [{g.verb} {g.obj} with {appliance_kind}]"
        if self.belief.location != appliance:
            yield f"Go to the {appliance_kind} to {g.verb} the {g.obj}.", f"go to {appliance}"
        yield f"{g.verb.capitalize()} the {obj} with the {appliance}.", f"{g.verb} {obj} with {appliance}"
        if self._use("note", 0.3):
            yield "This procedure works; keep it for later.", f"note [{PROCEDURES[g.verb]}]"
        self._done_phase()

    def _place(self, obj: str, dest: str, last: bool) -> Iterator[Step]:
        g = self.goal
        if self._use("commit", 0.7):
            yield f"Now put the {g.obj} in the {g.recep}.", f"commit [put {g.obj} in {g.recep}]"
        if g.verb and self._use("track", 0.3):
            yield f"Confirm the {obj} is in the right state before placing it.", f"track [{g.obj}]"
        if self.belief.location != dest:
            yield f"Take the {obj} to the {dest}.", f"go to {dest}"
        if dest in self.world.openable and self.belief.receptacles[dest].status != "open":
            yield f"The {dest} is closed; open it first.", f"open {dest}"
        final = "This completes the task." if last else "One done."
        yield f"Put the {obj} in the {dest}. {final}", f"move {obj} to {dest}"
        self._done_phase()

    def _use_lamp(self, obj: str) -> Iterator[Step]:
        g = self.goal
        if self._use("commit", 0.7):
            yield f"Holding the {g.obj}; now find the {g.lamp}.", f"commit [use {g.lamp} while holding {g.obj}]"
        prev = ""
        for recep in self._route(g.lamp):
            if self._visible(g.lamp):
                break
            if self.belief.location != recep:
                yield self._search_think(g.lamp, recep, prev), f"go to {recep}"
            prev = recep
        lamp = self._visible(g.lamp) or self._fallback_instance(g.lamp)
        if self.belief.location != self.world.contents[lamp]:
            yield f"The {lamp} is on the {self.world.contents[lamp]}; go there.", f"go to {self.world.contents[lamp]}"
        yield f"Turn on the {lamp} while holding the {obj}.", f"use {lamp}"
        self._done_phase()

    # -- search helpers ----------------------------------------------------------------------------

    def _destination(self) -> str:
        return self.rng.choice(self.world.of_type(self.goal.recep))

    def _instances(self, kind: str) -> list[str]:
        """Objects of `kind` that still count for the task: not held, not already placed by us."""
        return [o for o in self.world.contents if object_type(o) == kind and o not in self.belief.placed
                and o not in self.belief.holding]

    def _visible(self, kind: str) -> str:
        """An instance of `kind` (still needed) in the receptacle where the agent stands, else ""."""
        here = self.belief.receptacles.get(self.belief.location)
        if here is None:
            return ""
        wanted = set(self._instances(kind))
        seen = [o for o in sorted(here.contents, key=_name_key) if o in wanted]
        return seen[0] if seen else ""

    def _route(self, kind: str) -> list[str]:
        """Receptacles to visit: a few likely-looking empty ones, then one that has a `kind`."""
        known = [self.belief.objects[o].location for o in self._instances(kind)
                 if o in self.belief.objects and self.belief.objects[o].location in self.world.receptacles]
        if known:  # seen earlier in this episode: go straight there
            return [known[0]]
        prior = PLACEMENT_PRIORS.get(kind, {})
        noise = {r: self.rng.random() for r in self.world.receptacles}
        order = sorted(self.world.receptacles, key=lambda r: (
            -(1.0 if self.world.receptacles[r] in self.hints else 0.0),
            -prior.get(self.world.receptacles[r], 0.0), noise[r]))
        holders = {self.world.contents[o] for o in self._instances(kind)} or {
            self.world.contents[o] for o in self.world.contents if object_type(o) == kind}
        first_true = next(i for i, r in enumerate(order) if r in holders)
        unsearched = [r for r in order[:first_true] if not self.belief.receptacles[r].searched]
        hinted = [r for r in unsearched if self.world.receptacles[r] in self.hints]  # a recalled hint is tried
        others = [r for r in unsearched if r not in hinted][: self.rng.randint(0, MAX_DECOYS)]
        return (hinted + others)[: max(0, self._slack() // 3)] + [order[first_true]]

    def _fallback_instance(self, kind: str) -> str:
        """The instance where the privileged state says it is (the route always ends there)."""
        return sorted(self._instances(kind) or [o for o in self.world.contents if object_type(o) == kind],
                      key=_name_key)[0]

    def _search_think(self, kind: str, recep: str, prev: str) -> str:
        rtype = self.world.receptacles[recep]
        if prev:
            return self._say(("No {k} at {p}; try the {r} next.", "The {p} has no {k}. Check {r}."),
                             k=kind, p=prev, r=recep)
        if rtype in self.hints:
            return f"Experience says a {kind} is often on a {rtype}; check {recep}."
        return self._say(("A {k} is usually kept in a {t}; check {r}.", "Look for the {k} at {r} first."),
                         k=kind, t=rtype, r=recep)

    def _parse_hints(self, text: str) -> list[str]:
        """Receptacle types (present in this room) a recall result mentions, in order of mention."""
        kinds = set(self.world.receptacles.values())
        hints = []
        for word in re.findall(r"[a-z]+", text.lower()):
            word = word if word in kinds else word[:-1] if word.endswith("s") and word[:-1] in kinds else ""
            if word and word not in hints:
                hints.append(word)
        return hints
