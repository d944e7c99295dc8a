"""ALFWorld Belief: a rule-based world-state tracker built only from what the agent saw.

It reads the engine's own sentences ("You arrive at cabinet 1. The cabinet 1 is open.
In it, you see a mug 1.", "You pick up the mug 1 from the cabinet 1.", "You heat the
mug 1 using the microwave 1.", ...) after every environment action and keeps:

- receptacles: type, open/closed, visited, searched (contents seen), last seen contents;
- objects: last known location (a receptacle, or held), states (clean/hot/cool/sliced/on/off);
- the agent: where it stands and what it holds;
- placements the agent made (object -> receptacle), for progress.

`track [q]` answers for objects (fuzzy: "mug" matches "mug 1" and "mug 2"; "mugs",
"the mug" too) or receptacles; `render()` is the compact always_on view;
`auto_progress()` derives the task's subgoals (found / taken / transformed / placed).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from evoharness_rl.envs.alfworld.rooms import PLACEMENT_PRIORS, ROOMS, object_type
from evoharness_rl.harness.belief import Belief

if TYPE_CHECKING:  # pragma: no cover
    from evoharness_rl.envs.base import StepResult, Task

NAME = r"[a-z]+ \d+"
_NAMES = re.compile(rf"\b({NAME})\b")
ENGINE_EVENTS = {  # the engine's feedback messages (alfworld 0.4.2), shared with grounding.py
    "arrive": re.compile(rf"You arrive at ({NAME})\."),
    "open": re.compile(rf"You open the ({NAME})\."),
    "close": re.compile(rf"You close the ({NAME})\."),
    "take": re.compile(rf"You pick up the ({NAME}) from the ({NAME})\."),
    "move": re.compile(rf"You move the ({NAME}) to the ({NAME})\."),
    "transform": re.compile(rf"You (heat|cool|clean) the ({NAME}) using the ({NAME})\."),
    "toggle": re.compile(rf"You turn (on|off) the ({NAME})\."),
    "slice": re.compile(rf"You sliced the ({NAME}) with the ({NAME})\."),
}
_ON = re.compile(rf"On the ({NAME}), you see (.*?)\.(?:\s|$)")
_IN = re.compile(rf"The ({NAME}) is open\. In it, you see (.*?)\.(?:\s|$)")
_CLOSED = re.compile(rf"The ({NAME}) is closed\.")
_ROOM = re.compile(r"Looking quickly around you, you see (.*?)\.(?:\s|$)")
_CARRYING = re.compile(r"You are carrying: (.*?)\.")
_EXAMINE = re.compile(rf"This is a ((?:hot|cool|cold|clean|sliced|and| )+) ({NAME})\.")
_EXAMINE_TOGGLE = re.compile(rf"This ({NAME}) is (on|off)\.")
_STATE_WORDS = {"hot": "hot", "cool": "cool", "cold": "cool", "clean": "clean", "sliced": "sliced"}
_TRANSFORM_STATE = {"heat": "hot", "cool": "cool", "clean": "clean"}
_STOPWORDS = {"the", "a", "an", "my", "where", "is", "are", "find", "of", "location", "state", "status", "some", "to",
              "for", "all", "any", "what", "which", "in", "on", "object", "objects", "seen", "last"}
_VERBS = {  # task-text words that name neither the object nor the receptacle
    "put", "place", "move", "clean", "heat", "cool", "hot", "cold", "chill", "warm", "up", "wash", "rinse", "look",
    "at", "under", "examine", "with", "and", "it", "them", "two", "hold", "turn", "light", "then", "into", "onto"}
FAMILY_VERB = {"pick_clean_then_place_in_recep": "clean", "pick_heat_then_place_in_recep": "heat",
               "pick_cool_then_place_in_recep": "cool"}
APPLIANCE = {"clean": "sinkbasin", "heat": "microwave", "cool": "fridge"}
LIST_CAP = 12  # names listed per line before eliding the rest
_RECEPTACLE_TYPES = frozenset(r.lower() for room in ROOMS.values() for r in room["receptacles"])
# Types `track` recognises before they are seen ("track [apple]" -> "No apple seen yet ...").
VOCABULARY = frozenset(PLACEMENT_PRIORS) | _RECEPTACLE_TYPES


@dataclass
class Goal:
    """The task in agent terms (lower-case types), from the objective the agent reads."""

    family: str
    obj: str
    recep: str = ""  # destination type ("" for look tasks)
    lamp: str = ""  # lamp type for look tasks
    count: int = 1  # objects to place (2 for pick_two_obj_and_place)

    @property
    def verb(self) -> str:
        return FAMILY_VERB.get(self.family, "")


def goal_from_task(task: "Task") -> Goal:
    """Goal of a task: from its pddl_params (the objective's structured form) or, failing that, its text."""
    params = task.info.get("pddl_params") or {}
    obj = str(params.get("object_target") or "").lower()
    recep = str(params.get("parent_target") or "").lower()
    lamp = str(params.get("toggle_target") or "").lower()
    if not obj:
        words = re.findall(r"[a-z]+", task.objective.lower())
        words = words[1:] if words[:1] == ["microwave"] else words  # "microwave a potato and ..." (the verb)
        lamps = [w for w in words if w in ("desklamp", "floorlamp")]
        lamp = lamps[0] if lamps else ""
        content = [w for w in words if w not in _STOPWORDS and w not in _VERBS and w != lamp]
        obj = content[0] if content else ""
        recep = "" if lamp else (content[-1] if len(content) > 1 else "")
    count = 2 if task.family == "pick_two_obj_and_place" else 1
    return Goal(task.family, obj, recep, lamp, count)



@dataclass
class Receptacle:
    name: str
    status: str = ""  # "open" | "closed" | "" (unknown or not openable)
    visited: bool = False
    searched: bool = False  # its contents have been seen
    contents: set[str] = field(default_factory=set)


@dataclass
class Thing:
    name: str
    location: str = ""  # receptacle name, "held", or "" (unknown)
    states: set[str] = field(default_factory=set)
    seen_step: int = 0


class AlfworldBelief(Belief):
    """Episode-local ALFWorld world state from (action, observation) pairs."""

    def reset(self, task: "Task", first: "StepResult") -> None:
        self.goal = goal_from_task(task)
        self.receptacles: dict[str, Receptacle] = {}
        self.objects: dict[str, Thing] = {}
        self.location = ""
        self.holding: list[str] = []
        self.placed: dict[str, str] = {}  # object -> receptacle the agent moved it to
        self.steps = 0
        self.failed = 0  # actions answered "Nothing happens."
        match = _ROOM.search(first.observation)
        for name in _NAMES.findall(match.group(1) if match else ""):
            self.receptacles[name] = Receptacle(name)

    # -- updates ------------------------------------------------------------------------

    def update(self, action: str, result: "StepResult") -> None:
        self.steps += 1
        text = result.observation
        if text.strip().startswith("Nothing happens"):
            self.failed += 1
            return
        for kind, pattern in ENGINE_EVENTS.items():
            match = pattern.search(text)
            if match:
                getattr(self, f"_on_{kind}")(*match.groups())
        for pattern in (_ON, _IN):
            for recep, listing in pattern.findall(text):
                self._saw_contents(recep, listing)
        for recep in _CLOSED.findall(text):
            self._recep(recep).status = "closed"
        self._read_inventory(text)
        self._read_examine(text)

    def _recep(self, name: str) -> Receptacle:
        return self.receptacles.setdefault(name, Receptacle(name))

    def _thing(self, name: str) -> Thing:
        return self.objects.setdefault(name, Thing(name))

    def _on_arrive(self, recep: str) -> None:
        self.location = recep
        self._recep(recep).visited = True

    def _on_open(self, recep: str) -> None:
        self._recep(recep).status = "open"

    def _on_close(self, recep: str) -> None:
        self._recep(recep).status = "closed"

    def _on_take(self, obj: str, recep: str) -> None:
        self._recep(recep).contents.discard(obj)
        thing = self._thing(obj)
        thing.location, thing.seen_step = "held", self.steps
        self.placed.pop(obj, None)
        if obj not in self.holding:
            self.holding.append(obj)

    def _on_move(self, obj: str, recep: str) -> None:
        self._recep(recep).contents.add(obj)
        thing = self._thing(obj)
        thing.location, thing.seen_step = recep, self.steps
        self.placed[obj] = recep
        if obj in self.holding:
            self.holding.remove(obj)

    def _on_transform(self, verb: str, obj: str, appliance: str) -> None:
        states = self._thing(obj).states
        states.add(_TRANSFORM_STATE[verb])
        if verb == "heat":
            states.discard("cool")
        elif verb == "cool":
            states.discard("hot")

    def _on_toggle(self, state: str, obj: str) -> None:
        thing = self._thing(obj)
        thing.states.discard("off" if state == "on" else "on")
        thing.states.add(state)
        if not thing.location and self.location:
            thing.location = self.location

    def _on_slice(self, obj: str, knife: str) -> None:
        self._thing(obj).states.add("sliced")

    def _saw_contents(self, recep: str, listing: str) -> None:
        rec = self._recep(recep)
        now = set(_NAMES.findall(listing))
        for gone in rec.contents - now:  # no longer there: where it went is unknown
            if self.objects.get(gone) and self.objects[gone].location == recep:
                self.objects[gone].location = ""
        rec.contents, rec.searched = now, True
        if rec.status == "closed":
            rec.status = "open"
        for obj in now:
            thing = self._thing(obj)
            thing.location, thing.seen_step = recep, self.steps

    def _read_inventory(self, text: str) -> None:
        if "You are not carrying anything" in text:
            self.holding = []
            return
        match = _CARRYING.search(text)
        if match:
            self.holding = _NAMES.findall(match.group(1))
            for obj in self.holding:
                self._thing(obj).location = "held"

    def _read_examine(self, text: str) -> None:
        match = _EXAMINE.search(text)
        if match:
            words = match.group(1).split()
            self._thing(match.group(2)).states.update(_STATE_WORDS[w] for w in words if w in _STATE_WORDS)
        match = _EXAMINE_TOGGLE.search(text)
        if match:
            self._on_toggle(match.group(2), match.group(1))

    # -- queries --------------------------------------------------------------------------

    def instances(self, kind: str) -> list[str]:
        """Objects of type `kind` seen so far, sorted."""
        return sorted(name for name in self.objects if object_type(name) == kind)

    def searched_without(self, kind: str) -> list[str]:
        """Receptacles whose contents were seen and hold no `kind` now."""
        return [r.name for r in self._sorted_receptacles() if r.searched and
                not any(object_type(o) == kind for o in r.contents)]

    def unsearched(self) -> list[str]:
        return [r.name for r in self._sorted_receptacles() if not r.searched]

    def _sorted_receptacles(self) -> list[Receptacle]:
        return sorted(self.receptacles.values(), key=lambda r: _name_key(r.name))

    def track(self, query: str) -> str:
        words = [w for w in re.findall(r"[a-z]+|\d+", (query or "").lower()) if w not in _STOPWORDS]
        if not words:
            return self.render()
        text = " ".join(words)
        if text in ("inventory", "me", "hand", "hands", "holding", "self", "agent"):
            return self._where_am_i()
        if re.fullmatch(NAME, text) and (text in self.objects or text in self.receptacles):
            return self._track_receptacle(text) if text in self.receptacles else self._track_objects([text], text)
        kind = self._match_type(words)
        if kind is None:
            known = sorted({object_type(n) for n in self.objects} | {object_type(n) for n in self.receptacles})
            return f"Nothing matches '{query}'. Known: {_cap(known)}."
        receptacles = [r for r in sorted(self.receptacles, key=_name_key) if object_type(r) == kind]
        if receptacles:
            return "\n".join(self._track_receptacle(r) for r in receptacles)
        if kind in _RECEPTACLE_TYPES:
            return f"No {kind} in this room; receptacles here: {_cap(sorted(self.receptacles, key=_name_key))}."
        return self._track_objects(self.instances(kind), kind)

    def _match_type(self, words: list[str]) -> str | None:
        from rapidfuzz import fuzz, process

        kinds = sorted({object_type(n) for n in self.objects} | {object_type(n) for n in self.receptacles}
                       | {k for k in (self.goal.obj, self.goal.recep, self.goal.lamp) if k} | VOCABULARY)
        for candidate in ["".join(words)] + words:  # "desk lamp" -> "desklamp"; then word by word
            if candidate in kinds:
                return candidate
        for candidate in ["".join(words)] + words:
            best = process.extractOne(candidate, kinds, scorer=fuzz.ratio, score_cutoff=80)
            if best:
                return best[0]
        return None

    def _track_objects(self, names: list[str], kind: str) -> str:
        lines = [self._describe(self.objects[n]) for n in names if n in self.objects]
        if not lines:
            lines = [f"No {kind} seen yet."]
        lines.append(f"Searched (no {kind} there now): {_cap(self.searched_without(kind)) or 'none'}")
        lines.append(f"Not searched yet: {_cap(self.unsearched()) or 'none'}")
        return "\n".join(lines)

    def _describe(self, thing: Thing) -> str:
        where = {"held": "held by you", "": "location unknown (moved since last seen)"}.get(
            thing.location, f"in/on {thing.location}")
        states = f"; {', '.join(sorted(thing.states))}" if thing.states else ""
        step = f" (step {thing.seen_step})" if thing.location and thing.location != "held" else ""
        return f"{thing.name}: {where}{step}{states}"

    def _track_receptacle(self, name: str) -> str:
        rec = self.receptacles[name]
        status = f", {rec.status}" if rec.status else ""
        if rec.searched:
            contents = _cap(sorted(rec.contents, key=_name_key)) or "nothing"
            return f"{name}{status}: searched, contains {contents}"
        return f"{name}{status}: {'visited, contents not seen' if rec.visited else 'not visited'}"

    def _where_am_i(self) -> str:
        held = ", ".join(self._describe(self.objects[o]) for o in self.holding if o in self.objects) or "nothing"
        return f"You are at {self.location or 'the middle of the room'}; holding: {held}"

    def render(self) -> str:
        goal_kinds = {self.goal.obj, self.goal.lamp} - {""}
        things = sorted(self.objects.values(), key=lambda t: (object_type(t.name) not in goal_kinds, _name_key(t.name)))
        seen = [f"{t.name} @ {t.location or '?'}" + (f" ({', '.join(sorted(t.states))})" if t.states else "")
                for t in things if t.location != "held"]
        held = ", ".join(o + (f" ({', '.join(sorted(self.objects[o].states))})" if self.objects.get(o) and
                              self.objects[o].states else "") for o in self.holding) or "nothing"
        searched = [r.name + (f" ({r.status})" if r.status else "") for r in self._sorted_receptacles() if r.searched]
        unsearched = [r.name + (f" ({r.status})" if r.status else "") for r in self._sorted_receptacles()
                      if not r.searched]
        return "\n".join([
            f"Location: {self.location or 'middle of the room'} | Holding: {held}",
            f"Objects seen: {_cap(seen, 15) or 'none'}",
            f"Searched: {_cap(searched) or 'none'}",
            f"Not searched: {_cap(unsearched) or 'none'}",
        ])

    def auto_progress(self) -> list[tuple[str, bool]]:
        g = self.goal
        if not g.obj:
            return []
        seen = self.instances(g.obj)
        held = any(object_type(o) == g.obj for o in self.holding)
        placed = [o for o, r in self.placed.items() if object_type(o) == g.obj and object_type(r) == g.recep]
        done_place = len(placed) >= g.count
        taken = held or bool(placed)
        if g.family == "look_at_obj_in_light":
            lamp_on = any(object_type(n) == g.lamp and "on" in t.states for n, t in self.objects.items())
            return [(f"find {g.obj}", bool(seen)), (f"take {g.obj}", held or (taken and lamp_on)),
                    (f"find {g.lamp}", bool(self.instances(g.lamp))), (f"use {g.lamp} while holding {g.obj}", lamp_on)]
        if g.count == 2:
            return [(f"find two {g.obj}", len(seen) >= 2), (f"put first {g.obj} in {g.recep}", len(placed) >= 1),
                    (f"put second {g.obj} in {g.recep}", done_place)]
        items = [(f"find {g.obj}", bool(seen)), (f"take {g.obj}", taken)]
        if g.verb:
            state = _TRANSFORM_STATE[g.verb]
            transformed = any(state in self.objects[o].states for o in seen)
            items.append((f"{g.verb} {g.obj} with {APPLIANCE[g.verb]}", transformed))
        items.append((f"put {g.obj} in {g.recep}", done_place))
        return items


def _name_key(name: str) -> tuple[str, int]:
    kind, _, number = name.rpartition(" ")
    return (kind, int(number)) if number.isdigit() else (name, 0)


def _cap(items: list[str], cap: int = LIST_CAP) -> str:
    if len(items) <= cap:
        return ", ".join(items)
    return ", ".join(items[:cap]) + f", ... (+{len(items) - cap} more)"
