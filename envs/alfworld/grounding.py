"""ALFWorld text for the heuristic Experience consolidator (see evoharness_rl/experience/grounding.py).

It reads the engine's own phrasing (alfworld 0.4.2 grammar):
  "You arrive at cabinet 2. On the cabinet 2, you see a mug 1, and a spoon 2."
  "You open the fridge 1. The fridge 1 is open. In it, you see a apple 1."
  "You pick up the mug 1 from the cabinet 2."
and the commands "go to R", "open R", "take O from R", "move O to R", "heat/cool/clean O with R",
"use O". Instances ("mug 1", "cabinet 2") become types ("mug", "cabinet"). Notes written like
"kettle was on stoveburner 3" also count as sightings unless negated.
"""

from __future__ import annotations

import re

from evoharness_rl.envs.alfworld.belief import ENGINE_EVENTS
from evoharness_rl.rollout.trajectory import Trajectory

_SEEN_ON = re.compile(r"On the ([a-z]+ \d+), you see ([^.]*)\.")
_SEEN_IN = re.compile(r"The ([a-z]+ \d+) is open\. In it, you see ([^.]*)\.")
_PICKED, _MOVED = ENGINE_EVENTS["take"], ENGINE_EVENTS["move"]  # the engine's messages, as the Belief tracker reads them
_ARRIVE = re.compile(r"You arrive at (?:the )?([a-z]+) \d+")
_INSTANCE = re.compile(r"\b([a-z]+) \d+\b")
_NOTE_FACT = re.compile(
    r"\b([a-z]+)(?: \d+)? (?:is |was |are |were )?(?:usually |often |mostly |typically |found |located |kept |lies |sits )*"
    r"(?:on|in|at|inside) (?:the |a |an )?([a-z]+)(?: \d+)?"
)
_NEGATION = re.compile(r"\b(?:not|never|no|isn't|wasn't|aren't|weren't)\b")
_NOT_OBJECTS = frozenset("agent i it object objects item items task one something thing everything nothing".split())
_NAVIGATION = ("go to ", "open ", "close ", "examine ", "look", "inventory", "help")
_COMMANDS = (
    (re.compile(r"^take [a-z]+ \d+ from [a-z]+ \d+$"), lambda m: "take OBJ from RECEP"),
    (re.compile(r"^move [a-z]+ \d+ to [a-z]+ \d+$"), lambda m: "move OBJ to RECEP"),
    (re.compile(r"^(heat|cool|clean) [a-z]+ \d+ with ([a-z]+) \d+$"), lambda m: f"{m.group(1)} OBJ with {m.group(2)}"),
    (re.compile(r"^slice [a-z]+ \d+ with ([a-z]+) \d+$"), lambda m: f"slice OBJ with {m.group(1)}"),
    (re.compile(r"^use ([a-z]+) \d+$"), lambda m: f"use {m.group(1)}"),
    (re.compile(r"^(go to|open|close|examine) [a-z]+ \d+$"), lambda m: f"{m.group(1)} RECEP"),
)


def _type(instance: str) -> str:
    return instance.rsplit(" ", 1)[0]


class AlfworldGrounding:
    name = "alfworld"
    agent_description = "an embodied household agent in ALFWorld"
    task_noun = "task type"
    search_per_family = False  # where a kettle is does not depend on the task

    def search_facts(self, traj: Trajectory) -> list[tuple[str, str]]:
        """(object type, receptacle type) for every object instance seen at a receptacle instance
        (where the agent itself put an object does not count)."""
        seen: set[tuple[str, str]] = set()
        placed: set[tuple[str, str]] = set()
        receptacles: set[str] = set()
        for turn in traj.turns:
            if turn.action_kind != "env":  # harness results (recall!) are not observations
                continue
            text = turn.observation
            receptacles.update(_ARRIVE.findall(text))
            for receptacle, listing in _SEEN_ON.findall(text) + _SEEN_IN.findall(text):
                receptacles.add(_type(receptacle))
                seen.update((f"{obj} {n}", receptacle) for obj, n in re.findall(r"\b([a-z]+) (\d+)\b", listing))
            for obj, receptacle in _PICKED.findall(text):
                seen.add((obj, receptacle))
            placed.update(_MOVED.findall(text))
        facts = {(_type(obj), _type(receptacle)) for obj, receptacle in seen - placed}
        return sorted(facts | self._note_facts(traj.notes, receptacles))

    def _note_facts(self, notes: list[str], receptacles: set[str]) -> set[tuple[str, str]]:
        facts = set()
        for note in notes:
            for clause in re.split(r"[.;,!?]| but ", note.lower()):
                if _NEGATION.search(clause):
                    continue
                for obj, place in _NOTE_FACT.findall(clause):
                    if place in receptacles and obj not in receptacles and obj not in _NOT_OBJECTS:
                        facts.add((obj, place))
        return facts

    def skeleton(self, action: str) -> str:
        action = " ".join(action.lower().split())
        for pattern, build in _COMMANDS:
            match = pattern.match(action)
            if match:
                return build(match)
        return _INSTANCE.sub("X", action)

    def key_step(self, skeleton: str) -> bool:
        return bool(skeleton) and not skeleton.startswith(_NAVIGATION)

    def describe_search(self, subject: str, ranked: list[str]) -> str:
        text = f"Where to find {subject}: {ranked[0]} first"
        return text + (f", then {', '.join(ranked[1:])}" if ranked[1:] else "")

    def mistake_advice(self, pattern: str) -> tuple[str, str] | None:
        if pattern.startswith(("invalid:put ", "invalid:place ")):
            return ("'put X in/on Y' is not an ALFWorld command", "place objects with 'move X to Y'")
        if pattern == "invalid:take OBJ from RECEP":
            return ("taking an object that is not visible at the current receptacle",
                    "go to the receptacle (and open it) first; take only objects listed there")
        if pattern.startswith("invalid:") and pattern.split(" ", 1)[0] in ("invalid:heat", "invalid:cool", "invalid:clean"):
            return ("heating, cooling or cleaning without holding the object at the appliance",
                    "take the object, go to the microwave / fridge / sinkbasin, then heat / cool / clean it there")
        if pattern == "budget":
            return ("running out of steps before finishing the task",
                    "recall where the object usually is, search those receptacles first, and never re-check one already searched")
        if pattern == "revisit":
            return ("going back to the same receptacle or command three or more times",
                    "track the object to see which receptacles were already searched")
        return None


def make_grounding() -> AlfworldGrounding:
    return AlfworldGrounding()
