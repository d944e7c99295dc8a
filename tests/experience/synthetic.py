"""Synthetic ALFWorld-style trajectories for Experience unit tests (real engine text, scripted world).

A tiny household: objects start at receptacle types drawn from `PRIORS`; an agent searches
receptacles in some order (optionally the order a recalled search priority suggests),
takes the target, transforms it as its family requires, and places it. Observations use
the ALFWorld engine's phrasing, so the real `AlfworldGrounding` parses them.
"""

from __future__ import annotations

import random
import re

from evoharness_rl.rollout.trajectory import Trajectory, Turn

PRIORS = {
    "kettle": {"stoveburner": 0.7, "countertop": 0.2, "cabinet": 0.1},
    "mug": {"cabinet": 0.6, "countertop": 0.3, "coffeemachine": 0.1},
    "apple": {"fridge": 0.6, "countertop": 0.3, "diningtable": 0.1},
    "soapbar": {"sinkbasin": 0.6, "countertop": 0.3, "cabinet": 0.1},
}
RECEPTACLES = ["cabinet 1", "cabinet 2", "coffeemachine 1", "countertop 1", "countertop 2", "diningtable 1",
               "fridge 1", "microwave 1", "shelf 1", "sinkbasin 1", "stoveburner 1", "stoveburner 2"]
CLOSED = ("cabinet", "fridge", "microwave")
TRANSFORM = {
    "pick_and_place_simple": None,
    "pick_heat_then_place_in_recep": ("heat", "microwave 1"),
    "pick_cool_then_place_in_recep": ("cool", "fridge 1"),
    "pick_clean_then_place_in_recep": ("clean", "sinkbasin 1"),
}
FAMILIES = tuple(TRANSFORM)


def place_objects(rng: random.Random) -> dict[str, str]:
    """object instance -> receptacle instance, each object type once, drawn from PRIORS."""
    placement = {}
    for obj, prior in PRIORS.items():
        rtype = rng.choices(list(prior), weights=list(prior.values()))[0]
        placement[f"{obj} 1"] = rng.choice([r for r in RECEPTACLES if r.startswith(rtype)])
    return placement


def _listing(objs: list[str]) -> str:
    if not objs:
        return "nothing"
    items = [f"a {o}" for o in objs]
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + ", and " + items[-1]


class _Recorder:
    def __init__(self, family: str, task_id: str, max_steps: int):
        self.traj = Trajectory(task_id=task_id, family=family, env="alfworld", objective="", max_steps=max_steps)

    def env(self, action: str, observation: str, invalid: bool = False) -> None:
        t = self.traj
        turn = Turn(index=len(t.turns), messages=[], response=f"<action>{action}</action>",
                    action_kind="invalid" if invalid else "env", action=action, observation=observation,
                    invalid_reason="Nothing happens." if invalid else None)
        turn.repeated = bool(t.turns) and t.turns[-1].action == action and not invalid
        t.turns.append(turn)
        t.steps += 1
        t.invalid_count += invalid
        t.repeat_count += turn.repeated

    def harness(self, verb: str, arg: str, result: str) -> None:
        t = self.traj
        t.turns.append(Turn(index=len(t.turns), messages=[], response=f"<action>{verb} [{arg}]</action>",
                            action_kind="harness", action=arg, verb=verb, observation=result))
        t.steps += 1
        t.harness_calls[verb] = t.harness_calls.get(verb, 0) + 1

    @property
    def out_of_steps(self) -> bool:
        return self.traj.steps >= self.traj.max_steps


def episode(family: str, target: str, seed: int, experience=None, mistake: str | None = None,
            max_steps: int = 40, notes: tuple[str, ...] = ()) -> Trajectory:
    """One scripted episode. `experience` (a snapshot) makes the agent recall where to look first.

    mistake: None | "put" (tries 'put X in Y' first) | "wander" (searches without taking: runs out of steps).
    """
    rng = random.Random(f"{family}/{target}/{seed}")
    placement = place_objects(rng)
    rec = _Recorder(family, f"train/{family}-{target}/trial_{seed}", max_steps)
    rec.traj.seed, rec.traj.objective = seed, f"put a {target} in shelf."
    order = RECEPTACLES[:]
    rng.shuffle(order)
    order = [r for r in order if r != "shelf 1"]
    if experience is not None:
        order = _follow_recall(rec, experience, family, target, order)
    holding = _search(rec, placement, order, target, take=mistake != "wander")
    if holding and not rec.out_of_steps:
        _finish(rec, family, target, mistake)
    rec.traj.notes = list(notes)
    rec.traj.truncated = not rec.traj.won and rec.out_of_steps
    return rec.traj


def _follow_recall(rec: _Recorder, experience, family: str, target: str, order: list[str]) -> list[str]:
    text, ids = experience.recall(f"where to find {target}", family, 3)
    rec.harness("recall", f"where to find {target}", text)
    rec.traj.recalled_ids.extend(ids)
    match = re.search(r"Where to find \w+: (.*)", text)
    ranked = [w.strip() for w in re.split(r" first, then |, | first", match.group(1)) if w.strip()] if match else []
    rank = {rtype: i for i, rtype in enumerate(ranked)}
    return sorted(order, key=lambda r: rank.get(r.split()[0], len(rank)))


def _search(rec: _Recorder, placement: dict[str, str], order: list[str], target: str, take: bool) -> bool:
    for recep in order:
        if rec.out_of_steps:
            return False
        here = sorted(o for o, r in placement.items() if r == recep)
        if recep.startswith(CLOSED):
            rec.env(f"go to {recep}", f"You arrive at {recep}. The {recep} is closed.")
            if rec.out_of_steps:
                return False
            rec.env(f"open {recep}", f"You open the {recep}. The {recep} is open. In it, you see {_listing(here)}.")
        else:
            rec.env(f"go to {recep}", f"You arrive at {recep}. On the {recep}, you see {_listing(here)}.")
        if take and f"{target} 1" in here and not rec.out_of_steps:
            rec.env(f"take {target} 1 from {recep}", f"You pick up the {target} 1 from the {recep}.")
            return True
    while not rec.out_of_steps:  # lost: keep walking back and forth
        rec.env(f"go to {order[0]}", f"You arrive at {order[0]}. On the {order[0]}, you see nothing.")
    return False


def _finish(rec: _Recorder, family: str, target: str, mistake: str | None) -> None:
    transform = TRANSFORM[family]
    if transform:
        verb, appliance = transform
        rec.env(f"go to {appliance}", f"You arrive at {appliance}. The {appliance} is closed.")
        rec.env(f"{verb} {target} 1 with {appliance}", f"You {verb} the {target} 1 using the {appliance}.")
    rec.env("go to shelf 1", "You arrive at shelf 1. On the shelf 1, you see nothing.")
    if mistake == "put":
        while not rec.out_of_steps:
            rec.env(f"put {target} 1 in shelf 1", "Nothing happens.", invalid=True)
        return
    rec.env(f"move {target} 1 to shelf 1", f"You move the {target} 1 to the shelf 1.")
    rec.traj.won, rec.traj.score = True, 1.0


def batch(n: int, seed: int = 0, families=FAMILIES, experience=None, mistakes: dict | None = None) -> list[Trajectory]:
    """n episodes cycling through families and targets; `mistakes` maps family -> mistake kind."""
    targets = sorted(PRIORS)
    out = []
    for i in range(n):
        family = families[i % len(families)]
        target = targets[(i // len(families)) % len(targets)]
        kind = (mistakes or {}).get(family) if i % 3 == 0 else None
        out.append(episode(family, target, seed * 1000 + i, experience, kind))
    return out
