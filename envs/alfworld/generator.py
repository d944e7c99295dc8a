"""Deterministic ALFWorld game generator: room layouts, object placements, tasks, splits.

    write_splits(root, {"train": 3000, "valid_seen": 140, "valid_unseen": 134}, size="small", seed=0)

writes `<root>/{train,valid_seen,valid_unseen}/<task-folder>/<trial>/{traj_data.json,game.tw-pddl}`
(the official layout; `gamefile.py` has the format). Everything follows from `seed`:

- **Layouts** (like ALFRED floor plans): per room type (kitchen, living room, bedroom,
  bathroom) `LAYOUTS_PER_ROOM` receptacle sets sampled from `rooms.ROOMS` at the chosen
  size. The last `UNSEEN_LAYOUTS` of each room are never used in `train` or `valid_seen`.
- **Games**: a task (family, object type, destination or lamp) on a layout, with objects
  placed by `rooms.PLACEMENT_PRIORS`. `valid_seen` uses train layouts with placements and
  (layout, task) pairs that train never has; `valid_unseen` uses the held-out layouts.
- **Per-family counts** follow the official ALFWorld proportions (`rooms.FAMILY_PROPORTIONS`).
- **Verification**: every game is solved by the engine's expert before it is written
  (`expert="planner"`: TextWorld's fast-downward planner, on the game restricted to the
  receptacles and the objects the goal names, which is exact and fast — see `Verifier._plan`;
  `expert="handcoded"`: ALFWorld's handcoded expert playing the game, except for
  `pick_two_obj_and_place`, which that expert cannot solve in alfworld 0.4.2 — it looks
  for "put" in its last command but the command is "move" — so those use the planner).
  A game the expert cannot solve (or that is won before any action) is resampled.
  The plan is stored as the game's `walkthrough`.

Verification runs in worker processes (spawned: scripts that call `generate` or
`prepare` need an `if __name__ == "__main__":` guard, as with any multiprocessing code).
"""

from __future__ import annotations

import functools
import json
import multiprocessing
import os
import random
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable

from evoharness_rl.envs.alfworld import gamefile, rooms

LAYOUTS_PER_ROOM = 30  # layouts per room type (ALFRED: 30 floor plans per room type)
UNSEEN_LAYOUTS = 5  # of those, the last N are held out for valid_unseen
MAX_ATTEMPTS = 20  # resamples of one game before generation gives up
INSTANCES = {"small": 2, "medium": 3, "large": 4}  # most instances of one object type in a game

DESCRIPTIONS: dict[str, tuple[str, ...]] = {
    # The first two of each are ALFRED's templates (alfworld.gen.goal_library); the rest vary the wording.
    "pick_and_place_simple": (
        "put a {obj} in {recep}", "put some {obj} on {recep}", "place a {obj} in the {recep}",
        "find a {obj} and put it on the {recep}"),
    "look_at_obj_in_light": (
        "look at {obj} under the {toggle}", "examine the {obj} with the {toggle}",
        "look at the {obj} in the light of the {toggle}", "hold the {obj} and turn on the {toggle}"),
    "pick_clean_then_place_in_recep": (
        "put a clean {obj} in {recep}", "clean some {obj} and put it in {recep}",
        "wash a {obj} and put it on the {recep}", "rinse the {obj} and place it in the {recep}"),
    "pick_heat_then_place_in_recep": (
        "put a hot {obj} in {recep}", "heat some {obj} and put it in {recep}",
        "warm up a {obj} and put it on the {recep}", "microwave a {obj} and place it in the {recep}"),
    "pick_cool_then_place_in_recep": (
        "put a cool {obj} in {recep}", "cool some {obj} and put it in {recep}",
        "chill a {obj} and put it on the {recep}", "put a cold {obj} in the {recep}"),
    "pick_two_obj_and_place": (
        "put two {obj} in {recep}", "find two {obj} and put them in {recep}",
        "place two {obj} on the {recep}", "move two {obj} to the {recep}"),
}


class GenerationError(RuntimeError):
    """The generator could not produce a verified game (names the split and index)."""


# ----------------------------------------------------------------------------- tables


@functools.lru_cache(maxsize=1)
def _alfred_tables() -> tuple[dict[str, frozenset[str]], dict[str, frozenset[str]]]:
    """(receptacle type -> object types it can hold, property -> object types) from ALFRED's constants."""
    import alfworld.gen.constants as constants

    contain = {r: frozenset(objs) for r, objs in constants.VAL_RECEPTACLE_OBJECTS.items()}
    actions = {k: frozenset(v) for k, v in constants.VAL_ACTION_OBJECTS.items()}
    return contain, actions


def family_counts(split: str, total: int) -> dict[str, int]:
    """`total` games split across families in the official proportions (largest remainder)."""
    weights = rooms.FAMILY_PROPORTIONS.get(split, rooms.FAMILY_PROPORTIONS["train"])
    scale = total / sum(weights.values())
    counts = {f: int(w * scale) for f, w in weights.items()}
    by_remainder = sorted(weights, key=lambda f: (-(weights[f] * scale - counts[f]), rooms.FAMILIES.index(f)))
    for family in by_remainder[: total - sum(counts.values())]:
        counts[family] += 1
    return counts


# ----------------------------------------------------------------------------- layouts


def _coord(rng: random.Random) -> str:
    value = rng.uniform(-4.0, 4.0)
    sign = "_plus_" if value >= 0 else "_minus_"
    return f"{sign}{abs(value):05.2f}".replace(".", "_dot_")


def _receptacle_id(rtype: str, rng: random.Random) -> str:
    coords = "_bar_".join(_coord(rng) for _ in range(3))
    if rtype in ("SinkBasin", "BathtubBasin"):
        # The engine names a basin after the text before the first "_bar_" plus "basin".
        return f"{rtype[: -len('Basin')]}_bar_{coords}_bar_{rtype}"
    return f"{rtype}_bar_{coords}"


def _location(rng: random.Random) -> str:
    x, z = rng.randint(-15, 15), rng.randint(-15, 15)
    rot, horizon = rng.choice((0, 1, 2, 3)), rng.choice((-30, 0, 15, 30, 45, 60))
    return "loc_bar_" + "_bar_".join(f"_minus_{-v}" if v < 0 else str(v) for v in (x, z, rot, horizon))


@dataclass(frozen=True)
class Layout:
    """A room's fixed furniture (like an ALFRED floor plan)."""

    layout_id: str  # "kitchen-07"
    room: str  # kitchen | livingroom | bedroom | bathroom
    scene_num: int  # ALFRED-style scene number (kitchens 1-30, living rooms 201-230, ...)
    receptacles: tuple[tuple[str, str, str], ...]  # (PDDL id, type, location)
    start: str  # the agent's start location

    def types(self) -> set[str]:
        return {rtype for _, rtype, _ in self.receptacles}

    def of_type(self, rtype: str) -> list[tuple[str, str, str]]:
        return [r for r in self.receptacles if r[1] == rtype]


def make_layout(room: str, number: int, size: str, seed: int) -> Layout:
    """Layout `number` (1-based) of `room`: required receptacles, then more drawn by weight."""
    rng = random.Random(f"layout-{seed}-{room}-{number}-{size}")
    spec = rooms.ROOMS[room]
    counts = {rtype: 1 for rtype in spec["required"]}
    target = rng.randint(*rooms.SIZES[size]["receptacles"])
    while sum(counts.values()) < target:
        options = [(r, w) for r, (w, cap) in spec["receptacles"].items() if w > 0 and counts.get(r, 0) < cap]
        if not options:
            break
        rtype = rng.choices([r for r, _ in options], [w for _, w in options])[0]
        counts[rtype] = counts.get(rtype, 0) + 1
    used_ids, used_locs = set(), set()
    receptacles = []
    for rtype in sorted(counts):
        for _ in range(counts[rtype]):
            rid, loc = _receptacle_id(rtype, rng), _location(rng)
            while rid in used_ids or loc in used_locs:
                rid, loc = _receptacle_id(rtype, rng), _location(rng)
            used_ids.add(rid)
            used_locs.add(loc)
            receptacles.append((rid, rtype, loc))
    start = _location(rng)
    while start in used_locs:
        start = _location(rng)
    return Layout(f"{room}-{number:02d}", room, spec["scene_base"] + number, tuple(receptacles), start)


def layout_pools(size: str, seed: int) -> dict[str, dict[str, list[Layout]]]:
    """{"seen"|"unseen": {room: [Layout]}}; seen layouts serve train and valid_seen."""
    pools: dict[str, dict[str, list[Layout]]] = {"seen": {}, "unseen": {}}
    for room in rooms.ROOMS:
        layouts = [make_layout(room, n, size, seed) for n in range(1, LAYOUTS_PER_ROOM + 1)]
        pools["seen"][room] = layouts[: LAYOUTS_PER_ROOM - UNSEEN_LAYOUTS]
        pools["unseen"][room] = layouts[LAYOUTS_PER_ROOM - UNSEEN_LAYOUTS :]
    return pools


# ----------------------------------------------------------------------------- games


@dataclass
class GameSpec:
    """One sampled game before verification."""

    split: str
    index: int
    family: str
    layout: Layout
    object_target: str  # ALFRED type, e.g. "Mug"
    parent_target: str  # destination receptacle type ("" for look tasks)
    toggle_target: str  # lamp type for look tasks ("" otherwise)
    objects: list[tuple[str, str, str, str]]  # (PDDL id, type, receptacle id, location)
    descriptions: list[str]  # task texts; the game uses one of them
    seed: int
    size: str
    attempt: int = 0
    walkthrough: list[str] = field(default_factory=list)

    @property
    def key(self) -> tuple[str, str, str, str, str]:
        """(layout, family, object, destination or lamp): what makes a task 'the same goal'."""
        return (self.layout.layout_id, self.family, self.object_target, self.parent_target, self.toggle_target)

    @property
    def rel_dir(self) -> str:
        target = self.parent_target or self.toggle_target
        task = f"{self.family}-{self.object_target}-None-{target}-{self.layout.scene_num}"
        return f"{self.split}/{task}/trial_G{self.seed}_{self.index:05d}"

    def params(self) -> dict[str, Any]:
        return {"object_target": self.object_target, "parent_target": self.parent_target,
                "toggle_target": self.toggle_target, "mrecep_target": "", "object_sliced": False}

    def traj_data(self) -> dict[str, Any]:
        return {
            "task_type": self.family,
            "task_id": f"trial_G{self.seed}_{self.index:05d}",
            "pddl_params": self.params(),
            "scene": {"floor_plan": f"FloorPlan{self.layout.scene_num}", "scene_num": self.layout.scene_num},
            "turk_annotations": {"anns": [{"task_desc": d, "high_descs": []} for d in self.descriptions]},
            "generator": {"layout": self.layout.layout_id, "room": self.layout.room, "size": self.size,
                          "split": self.split, "seed": self.seed, "index": self.index, "attempt": self.attempt},
        }

    def task_objects(self) -> list[tuple[str, str, str, str]]:
        """The objects the goal can mention: every instance of the target type, and the lamp."""
        return [o for o in self.objects if o[1] in (self.object_target, self.toggle_target)]

    def problem(self, task_only: bool = False) -> str:
        """The PDDL problem; `task_only` keeps just `task_objects()` (what verification plans on)."""
        contain, actions = _alfred_tables()
        objects = self.task_objects() if task_only else self.objects
        props = []
        for oid, otype, _, _ in objects:
            if otype in rooms.LAMPS:
                props.append(("toggleable", oid))
                continue
            props.append(("pickupable", oid))
            for predicate, prop in (("cleanable", "Cleanable"), ("heatable", "Heatable"),
                                    ("coolable", "Coolable"), ("sliceable", "Sliceable")):
                if otype in actions[prop]:
                    props.append((predicate, oid))
        props += [("openable", rid) for rid, rtype, _ in self.layout.receptacles if rtype in rooms.OPENABLE]
        otypes = {otype for _, otype, _, _ in objects}
        pairs = sorted((r, o) for r in self.layout.types() for o in otypes if o in contain.get(r, ()))
        name = f"plan_{self.split}_{self.index}"
        goal = gamefile.goal_pddl(self.family, self.params())
        return gamefile.pddl_problem(name, self.layout.start, self.layout.receptacles, objects, props, pairs, goal)

    def game_json(self) -> dict[str, Any]:
        rng = random.Random(f"desc-{self.seed}-{self.split}-{self.index}-{self.attempt}")
        return gamefile.game_json(self.problem(), self.traj_data(), self.walkthrough, rng)


def _eligible_destinations(layout: Layout, family: str, otype: str, contain: dict[str, set[str]]) -> list[str]:
    appliance = rooms.APPLIANCES.get(family)
    return sorted(r for r in layout.types() if otype in contain.get(r, ()) and r != appliance)


def _eligible_targets(layout: Layout, family: str, actions: dict[str, set[str]], contain) -> list[str]:
    """Object types of the room that can be the task's object on this layout."""
    needs = {"pick_clean_then_place_in_recep": "Cleanable", "pick_heat_then_place_in_recep": "Heatable",
             "pick_cool_then_place_in_recep": "Coolable"}.get(family)
    out = []
    for otype in sorted(rooms.ROOMS[layout.room]["objects"]):
        if needs and otype not in actions[needs]:
            continue
        if not _placements(layout, otype, contain, forbid=""):
            continue
        if family == "look_at_obj_in_light" or len(_eligible_destinations(layout, family, otype, contain)) >= 2:
            out.append(otype)
    return out


def _placements(layout: Layout, otype: str, contain: dict[str, set[str]], forbid: str) -> dict[str, float]:
    """P(receptacle type) for where an object of `otype` starts on this layout."""
    prior = rooms.PLACEMENT_PRIORS[otype.lower()]
    present = {r.lower(): r for r in layout.types() if r != forbid}
    weights = {present[r]: p for r, p in prior.items() if r in present}
    if not weights and otype not in rooms.LAMPS:  # no usual place here: anywhere it fits
        weights = {r: 1.0 for r in present.values() if otype in contain.get(r, ())}
    return weights


def _place(layout: Layout, otype: str, count: int, rng: random.Random, contain, forbid: str,
           used: set[str]) -> list[tuple[str, str, str, str]]:
    weights = _placements(layout, otype, contain, forbid)
    if not weights:
        return []
    placed = []
    for _ in range(count):
        rtype = rng.choices(sorted(weights), [weights[r] for r in sorted(weights)])[0]
        rid, _, loc = rng.choice(layout.of_type(rtype))
        oid = f"{otype}_bar_{_coord(rng)}_bar_{_coord(rng)}_bar_{_coord(rng)}"
        while oid in used:
            oid = f"{otype}_bar_{_coord(rng)}_bar_{_coord(rng)}_bar_{_coord(rng)}"
        used.add(oid)
        placed.append((oid, otype, rid, loc))
    return placed


def sample_game(split: str, index: int, family: str, layouts: dict[str, list[Layout]], size: str, seed: int,
                attempt: int = 0, avoid: frozenset = frozenset()) -> GameSpec:
    """Sample one game of `family` on one of `layouts` (a room -> layouts pool).

    Resamples internally until the task is possible on the layout and its (layout, task)
    key is not in `avoid`.
    """
    contain, actions = _alfred_tables()
    rng = random.Random(f"game-{seed}-{split}-{index}-{attempt}")
    rooms_here = [room for room in rooms.FAMILY_ROOMS[family] if layouts.get(room)]
    for _ in range(200 if rooms_here else 0):
        room = rng.choice(rooms_here)
        layout = rng.choice(layouts[room])
        targets = _eligible_targets(layout, family, actions, contain)
        if not targets:
            continue
        otype = rng.choice(targets)
        parent = toggle = ""
        if family == "look_at_obj_in_light":
            lamps = rooms.ROOMS[room]["lamps"]
            toggle = rng.choices(sorted(lamps), [lamps[k] for k in sorted(lamps)])[0]
            if not _placements(layout, toggle, contain, forbid=""):
                continue
        else:
            options = _eligible_destinations(layout, family, otype, contain)
            parent = rng.choices(options, [rooms.DESTINATION_WEIGHTS.get(r, 1.0) for r in options])[0]
        spec = GameSpec(split, index, family, layout, otype, parent, toggle, [], [], seed, size, attempt)
        if spec.key in avoid:
            continue
        spec.objects = _scene_objects(spec, rng, contain)
        spec.descriptions = _descriptions(spec, rng)
        return spec
    raise GenerationError(f"{split} game {index}: no {family} task fits the layouts of size {size!r}")


def _scene_objects(spec: GameSpec, rng: random.Random, contain) -> list[tuple[str, str, str, str]]:
    """Target instances (never starting in the destination), the lamp, then distractors up to the size."""
    layout, cap = spec.layout, INSTANCES[spec.size]
    used: set[str] = set()
    low = 2 if spec.family == "pick_two_obj_and_place" else 1
    objects = _place(layout, spec.object_target, rng.randint(low, max(low, cap)), rng, contain,
                     forbid=spec.parent_target, used=used)
    if spec.toggle_target:
        objects += _place(layout, spec.toggle_target, 1, rng, contain, forbid="", used=used)
    counts = {spec.object_target: cap}  # the target's instances are fixed above
    pool = rooms.ROOMS[layout.room]["objects"]
    target = rng.randint(*rooms.SIZES[spec.size]["objects"])
    while len(objects) < target:
        options = [o for o in sorted(pool) if counts.get(o, 0) < cap and _placements(layout, o, contain, "")]
        if not options:
            break
        otype = rng.choices(options, [pool[o] for o in options])[0]
        counts[otype] = counts.get(otype, 0) + 1
        objects += _place(layout, otype, 1, rng, contain, forbid="", used=used)
    return objects


def _descriptions(spec: GameSpec, rng: random.Random) -> list[str]:
    templates = list(DESCRIPTIONS[spec.family])
    rng.shuffle(templates)
    fill = {"obj": spec.object_target.lower(), "recep": spec.parent_target.lower(),
            "toggle": spec.toggle_target.lower()}
    return [t.format(**fill) for t in templates[:3]]


# ----------------------------------------------------------------------------- verification


class Verifier:
    """Solves games with the engine's expert. One per process (it holds a fast-downward copy)."""

    def __init__(self, expert: str = "planner"):
        if expert not in ("planner", "handcoded"):
            raise ValueError(f"expert={expert!r} is not an ALFWorld expert; expected 'planner' or 'handcoded'")
        import fast_downward
        from textworld.envs.pddl import logic as pddl_logic

        domain, grammar = gamefile.domain_and_grammar()
        self.expert = expert
        self._pddl_logic = pddl_logic
        # Parsed once per process: planning does not depend on the task text in the grammar.
        self._logic = pddl_logic.GameLogic(domain=domain, grammar=grammar)
        self._lib = fast_downward.load_lib()

    def solve(self, spec: GameSpec) -> list[str] | None:
        """The expert's winning command list, or None (unsolvable, or already won at the start)."""
        if self.expert == "handcoded" and spec.family != "pick_two_obj_and_place":
            return self._handcoded(spec)
        return self._planner(spec.problem(task_only=True))

    def _planner(self, problem: str) -> list[str] | None:
        with gamefile.keep_argv():
            try:
                return self._plan(problem)
            except (KeyError, ValueError, AssertionError):
                # The translator simplifies a statically unsolvable problem (no object of the
                # goal's type) into a task the engine cannot load; that game is unsolvable.
                return None

    def _plan(self, problem: str) -> list[str] | None:
        # Planning on the task-only problem is exact and keeps large games fast (the planner
        # needs ~1 min on a full 30-receptacle, 60-object problem): every instance of the
        # goal's types is in it, so the goal holds in one iff in the other, and the other
        # objects cannot block a plan (the domain has no capacity or blocking preconditions;
        # the agent only ever holds what it takes). The names match too: the engine numbers
        # instances per type, and every instance of the types a plan touches is present.
        state = self._pddl_logic.PddlState(self._lib, problem, self._logic)
        if state.check_goal():
            return None
        plan = state.replan(_display_names(state))
        return plan or None

    def _handcoded(self, spec: GameSpec) -> list[str] | None:
        # ALFWorld's handcoded expert draws from the global `random`: seed it per game (and
        # restore it afterwards) so that generation stays deterministic.
        saved = random.getstate()
        random.seed(f"handcoded-{spec.seed}-{spec.split}-{spec.index}-{spec.attempt}")
        try:
            with tempfile.TemporaryDirectory() as tmp:  # the expert reads traj_data.json next to the game
                _write_game(Path(tmp), spec)
                return _play_handcoded(Path(tmp) / gamefile.GAME_FILE)
        finally:
            random.setstate(saved)


def _play_handcoded(game_file: Path, max_steps: int = 150) -> list[str] | None:
    """Follow ALFWorld's handcoded expert in the real engine; its commands if it wins."""
    import textworld
    from alfworld.agents.environment.alfred_tw_env import AlfredDemangler, AlfredExpert, AlfredInfos

    infos = textworld.EnvInfos(won=True, admissible_commands=True, facts=True, extras=["gamefile", "expert_plan"])
    wrappers = [AlfredDemangler(), AlfredInfos, AlfredExpert(expert_type="handcoded")]
    with gamefile.keep_argv():
        env = textworld.start(str(game_file), infos, wrappers=wrappers)
    try:
        with gamefile.keep_argv():
            state, commands = env.reset(), []
        for _ in range(max_steps):
            if state["won"]:
                return commands or None  # won before any action: not a valid game
            commands.append(state["extra.expert_plan"][0])
            state, _, _ = env.step(commands[-1])
    except Exception:  # the handcoded expert signals failure with exceptions (timeout, no subgoal left)
        return None
    finally:
        env.close()
    return None


def _display_names(state: Any) -> dict[str, Any]:
    """Entity infos named as the engine shows them ("mug 1"), using ALFWorld's own demangler."""
    from alfworld.agents.utils.misc import Demangler
    from textworld.generator.game import EntityInfo

    infos = {v.name: EntityInfo(v.name, v.type) for fact in state.facts for v in fact.arguments}
    demangler = Demangler(game_infos=infos)
    for info in infos.values():
        info.name = demangler.demangle_alfred_name(info.id)
    return infos


_WORKER: dict[str, Any] = {}  # per-process: the verifier, the layout pools, the keys to avoid


def _init_worker(expert: str, size: str, seed: int, avoid: frozenset) -> None:
    _WORKER.update(verifier=Verifier(expert), pools=layout_pools(size, seed), size=size, seed=seed, avoid=avoid)


def _verify_job(job: tuple[str, int, str]) -> GameSpec:
    """Worker: sample and verify game `index` of `split`, resampling until the expert solves it."""
    split, index, family = job
    layouts = _WORKER["pools"]["unseen" if split == "valid_unseen" else "seen"]
    avoid = _WORKER["avoid"] if split == "train" else frozenset()
    for attempt in range(MAX_ATTEMPTS):
        spec = sample_game(split, index, family, layouts, _WORKER["size"], _WORKER["seed"], attempt, avoid)
        plan = _WORKER["verifier"].solve(spec)
        if plan:
            spec.walkthrough = plan
            return spec
    raise GenerationError(f"{split} game {index} ({family}): the expert solved none of {MAX_ATTEMPTS} samples")


# ----------------------------------------------------------------------------- splits


def _split_jobs(split: str, total: int, seed: int) -> list[tuple[str, int, str]]:
    families = [f for f, n in family_counts(split, total).items() for _ in range(n)]
    random.Random(f"order-{seed}-{split}").shuffle(families)
    return [(split, i, family) for i, family in enumerate(families)]


def generate(counts: dict[str, int], size: str = "small", seed: int = 0, expert: str = "planner",
             workers: int | None = None, on_game: Callable[[GameSpec], None] | None = None) -> list[GameSpec]:
    """Sample and verify the games of every split in `counts` ({split: number of games}).

    The validation splits come first: train then avoids every (layout, task) pair of
    valid_seen, so valid_seen has seen layouts with goals train never had.
    """
    if size not in rooms.SIZES:
        raise ValueError(f"size={size!r} is not a generated game size; expected one of {', '.join(rooms.SIZES)}")
    unknown = set(counts) - set(gamefile.SPLITS)
    if unknown:
        raise ValueError(f"unknown split(s) {sorted(unknown)}; expected {', '.join(gamefile.SPLITS)}")
    valid_jobs = [job for split in ("valid_seen", "valid_unseen") if counts.get(split)
                  for job in _split_jobs(split, counts[split], seed)]
    specs = _run_jobs(valid_jobs, (expert, size, seed, frozenset()), workers, on_game)
    avoid = frozenset(spec.key for spec in specs if spec.split == "valid_seen")
    if counts.get("train"):
        specs += _run_jobs(_split_jobs("train", counts["train"], seed), (expert, size, seed, avoid), workers, on_game)
    return specs


def _run_jobs(jobs: list[tuple], init_args: tuple, workers: int | None, on_game) -> list[GameSpec]:
    if not jobs:
        return []
    workers = max(1, min(workers or os.cpu_count() or 1, len(jobs)))
    specs = []
    if workers == 1:
        _init_worker(*init_args)
        for job in jobs:
            specs.append(_verify_job(job))
            if on_game:
                on_game(specs[-1])
        return specs
    # spawn, not fork: the caller may hold threads (torch, tokenizers) that fork would copy in a bad state.
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(workers, initializer=_init_worker, initargs=init_args) as pool:
        for spec in pool.imap(_verify_job, jobs, chunksize=4):
            specs.append(spec)
            if on_game:
                on_game(spec)
    return specs


def _write_game(game_dir: Path, spec: GameSpec) -> None:
    game_dir.mkdir(parents=True, exist_ok=True)
    (game_dir / gamefile.TRAJ_FILE).write_text(json.dumps(spec.traj_data(), indent=2), encoding="utf-8")
    (game_dir / gamefile.GAME_FILE).write_text(json.dumps(spec.game_json()), encoding="utf-8")


def write_games(root: Path, specs: Iterable[GameSpec]) -> list[str]:
    """Write games under `root` (official layout); returns their task ids (relative folders)."""
    ids = []
    for spec in specs:
        _write_game(Path(root) / spec.rel_dir, spec)
        ids.append(spec.rel_dir)
    return sorted(ids)


def write_splits(root: Path, counts: dict[str, int], size: str = "small", seed: int = 0, expert: str = "planner",
                 workers: int | None = None, on_game: Callable[[GameSpec], None] | None = None) -> list[str]:
    """Generate, verify and write every split into `root` (replacing what was there)."""
    root = Path(root)
    specs = generate(counts, size, seed, expert, workers, on_game)
    for split in counts:
        shutil.rmtree(root / split, ignore_errors=True)
    return write_games(root, specs)
