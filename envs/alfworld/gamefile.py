"""The on-disk ALFWorld game format: write it (generator) and check it (adapter).

A game is a folder `<root>/<split>/<task-folder>/<trial>/` with two files:

- `traj_data.json`: `task_type`, `pddl_params` {object_target, parent_target,
  toggle_target, mrecep_target, object_sliced} and `turk_annotations.anns[].task_desc`;
- `game.tw-pddl` (JSON): `pddl_domain` (text of the wheel's alfred.pddl), `grammar`
  (alfred.twl2 with the task text in place of "UNKNOWN GOAL"), `pddl_problem`,
  `solvable` (must be true) and `walkthrough` (a plan, for reference).

PDDL naming follows ALFRED so the engine shows the usual names: an object
`Mug_bar_<coords>` appears as "mug 1"; a sink must be `Sink_bar_<coords>_bar_SinkBasin`
to appear as "sinkbasin 1"; types are `MugType - otype` / `CabinetType - rtype`.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.resources
import json
import re
import sys
from pathlib import Path
from typing import Any, Iterable, Iterator
from evoharness_rl.errors import UserError

GAME_FILE = "game.tw-pddl"
TRAJ_FILE = "traj_data.json"
SPLITS = ("train", "valid_seen", "valid_unseen")
EXPECTED_LAYOUT = "<root>/{train,valid_seen,valid_unseen}/<task-folder>/<trial>/{traj_data.json,game.tw-pddl}"

GAME_FIELDS = ("pddl_domain", "grammar", "pddl_problem", "solvable")
TRAJ_FIELDS = ("task_type", "pddl_params")
PDDL_PARAMS = ("object_target", "parent_target", "toggle_target", "mrecep_target", "object_sliced")


class GameFileError(UserError, ValueError):
    """A game file is missing, unreadable or lacks a required field (the message names both)."""


@contextlib.contextmanager
def keep_argv() -> Iterator[None]:
    """Restore sys.argv afterwards: fast-downward's translator overwrites it (a hack in its
    `pddl2sas`), which would break any later argument parsing in the process."""
    saved = list(sys.argv)
    try:
        yield
    finally:
        sys.argv[:] = saved


@functools.lru_cache(maxsize=1)
def domain_and_grammar() -> tuple[str, str]:
    """The PDDL domain and the text grammar shipped in the `alfworld` wheel."""
    data = importlib.resources.files("alfworld") / "data"
    return (data / "alfred.pddl").read_text(encoding="utf-8"), (data / "alfred.twl2").read_text(encoding="utf-8")


# ----------------------------------------------------------------------------- writing


def pddl_problem(
    name: str,
    start: str,
    receptacles: Iterable[tuple[str, str, str]],
    objects: Iterable[tuple[str, str, str, str]],
    properties: Iterable[tuple[str, str]],
    can_contain: Iterable[tuple[str, str]],
    goal: str,
) -> str:
    """The text of a PDDL problem for the alfred domain.

    receptacles: (id, type, location); objects: (id, type, receptacle id, location);
    properties: (predicate, object id), e.g. ("pickupable", "Mug_bar_..."); can_contain:
    (receptacle type, object type); goal: an `(:goal ...)` block (from ALFRED's goal library).
    """
    receptacles, objects = list(receptacles), list(objects)
    rtypes = sorted({rtype for _, rtype, _ in receptacles})
    otypes = sorted({otype for _, otype, _, _ in objects})
    locations = sorted({start} | {loc for _, _, loc in receptacles})
    declared = ["agent1 - agent"]
    declared += [f"{t}Type - otype" for t in otypes] + [f"{t}Type - rtype" for t in rtypes]
    declared += [f"{rid} - receptacle" for rid, _, _ in receptacles]
    declared += [f"{oid} - object" for oid, _, _, _ in objects]
    declared += [f"{loc} - location" for loc in locations]
    init = [f"(atLocation agent1 {start})"]
    for rid, rtype, loc in receptacles:
        init += [f"(receptacleType {rid} {rtype}Type)", f"(receptacleAtLocation {rid} {loc})"]
    for oid, otype, rid, loc in objects:
        init += [f"(objectType {oid} {otype}Type)", f"(inReceptacle {oid} {rid})", f"(objectAtLocation {oid} {loc})"]
    init += [f"({predicate} {oid})" for predicate, oid in properties]
    init += [f"(canContain {rtype}Type {otype}Type)" for rtype, otype in can_contain]
    lines = [f"(define (problem {name})", "    (:domain alfred)", "    (:objects"]
    lines += [f"        {d}" for d in declared] + ["    )", "    (:init"]
    lines += [f"        {fact}" for fact in init] + ["    )"]
    return "\n".join(lines) + "\n" + goal.strip() + "\n"


def goal_pddl(task_type: str, params: dict[str, Any]) -> str:
    """ALFRED's goal for `task_type` (alfworld.gen.goal_library), closing the problem's `define`."""
    import alfworld.gen.goal_library as goal_library

    text = goal_library.gdict[task_type]["pddl"].format(
        obj=params["object_target"], recep=params["parent_target"],
        toggle=params["toggle_target"], mrecep=params["mrecep_target"],
    )
    return text.replace("#", "-")  # the library writes PDDL's "- type" as "# type"


def game_json(problem: str, traj_data: dict[str, Any], walkthrough: list[str], rng: Any) -> dict[str, Any]:
    """The content of game.tw-pddl; the task text is one of the annotations (chosen by `rng`)."""
    from alfworld.agents.utils.misc import add_task_to_grammar

    domain, grammar = domain_and_grammar()
    return {
        "pddl_domain": domain,
        "grammar": add_task_to_grammar(grammar, traj_data, goal_desc_human_anns_prob=1.0, rng=rng),
        "pddl_problem": problem,
        "solvable": True,
        "walkthrough": list(walkthrough),
    }


# ----------------------------------------------------------------------------- reading


def _read_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise GameFileError(f"{path}: file not found; a game folder needs {TRAJ_FILE} and {GAME_FILE}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise GameFileError(f"{path}: not valid JSON ({err})") from None
    if not isinstance(data, dict):
        raise GameFileError(f"{path}: expected a JSON object, got {type(data).__name__}")
    return data


def read_traj_data(game_dir: Path) -> dict[str, Any]:
    """traj_data.json of a game, checked for the fields the adapter uses."""
    path = Path(game_dir) / TRAJ_FILE
    data = _read_json(path)
    for key in TRAJ_FIELDS:
        if key not in data:
            raise GameFileError(f"{path}: missing field '{key}' (required: {', '.join(TRAJ_FIELDS)})")
    params = data["pddl_params"]
    if not isinstance(params, dict) or "object_target" not in params:
        raise GameFileError(
            f"{path}: missing field 'pddl_params.object_target' (pddl_params needs {', '.join(PDDL_PARAMS)})"
        )
    return data


def read_game(game_dir: Path) -> dict[str, Any]:
    """game.tw-pddl of a game, checked for the fields the engine needs."""
    path = Path(game_dir) / GAME_FILE
    data = _read_json(path)
    for key in GAME_FIELDS:
        if key not in data:
            raise GameFileError(f"{path}: missing field '{key}' (required: {', '.join(GAME_FIELDS)})")
    if data["solvable"] is not True:
        raise GameFileError(
            f"{path}: field 'solvable' is {data['solvable']!r}; only games marked solvable can be played"
        )
    return data


def find_games(split_dir: Path) -> list[Path]:
    """Game folders (those holding traj_data.json) under one split folder, sorted.

    Like ALFWorld's loader it skips folders named with 'movable' or 'Sliced' (task
    variants the text engine does not support) and folders without a game file.
    """
    games = []
    for traj in Path(split_dir).rglob(TRAJ_FILE):
        rel = str(traj.parent.relative_to(split_dir))
        if "movable" in rel or "Sliced" in rel or not (traj.parent / GAME_FILE).is_file():
            continue
        games.append(traj.parent)
    return sorted(games)


_SOLVABLE = re.compile(r'"solvable"\s*:\s*true')


def marked_solvable(game_dir: Path) -> bool:
    """Whether game.tw-pddl says `"solvable": true` (a text scan: cheap on thousands of games)."""
    try:
        return bool(_SOLVABLE.search((Path(game_dir) / GAME_FILE).read_text(encoding="utf-8", errors="replace")))
    except OSError:
        return False
