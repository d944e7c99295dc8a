"""ALFWorld on the real engine: TextWorld's PDDL environment with ALFWorld's wrappers.

    env = AlfworldEnv.from_config(cfg.env)
    ids = env.task_ids("valid_unseen")             # "valid_unseen/<task-folder>/<trial>", sorted
    task, first = env.reset(ids[0])                # first.observation: the engine's intro incl. "Your task is to: ..."
    result = env.step("go to countertop 1")        # engine text, admissible commands, won

Data (first match wins): `env.data_path`; `$ALFWORLD_DATA/json_2.1.1` (the official
data); the games `prepare` generated under `env.data_dir`. Every folder must follow
the official layout `<root>/{train,valid_seen,valid_unseen}/<task-folder>/<trial>/`.

Observations, admissible commands and `won` are the engine's, unchanged. A command
that is not admissible gets the engine's own "Nothing happens." and `invalid=True`.
Games are deterministic: `seed` does not change anything (names are not shuffled, as in
ALFWorld's evaluation).
"""

from __future__ import annotations

import os
import random
import re
from pathlib import Path
from typing import Any

from evoharness_rl.envs.alfworld import fast_path as fast_path_module
from evoharness_rl.envs.alfworld import gamefile
from evoharness_rl.envs.alfworld.belief import AlfworldBelief
from evoharness_rl.envs.alfworld.prompts import alfworld_spec
from evoharness_rl.envs.alfworld.teacher import AlfworldTeacher, World
from evoharness_rl.envs.base import Environment, StepResult, Task
from evoharness_rl.errors import UserError

_TASK_LINE = re.compile(r"Your task is to:\s*(.+?)\.?\s*$", re.MULTILINE)
_ALFWORLD_DEFAULT_CACHE = Path("~/.cache/alfworld").expanduser()


class DataLayoutError(UserError, FileNotFoundError):
    """The data folder is missing or not in the official ALFWorld layout (the message says which)."""


def _user_alfworld_data() -> str | None:
    """$ALFWORLD_DATA as the user set it.

    `import alfworld` sets the variable to ~/.cache/alfworld when it is unset, so that
    value only counts when the official data is actually there.
    """
    value = os.environ.get("ALFWORLD_DATA")
    if not value:
        return None
    path = Path(value).expanduser()
    if path.resolve() == _ALFWORLD_DEFAULT_CACHE.resolve() and not (path / "json_2.1.1").is_dir():
        return None
    return value


def resolve_data_root(env_cfg: Any) -> Path:
    """The folder holding the split folders (see the module docstring for the order)."""
    if env_cfg.data_path:
        return Path(env_cfg.data_path).expanduser()
    user = _user_alfworld_data()
    if user:
        return Path(user).expanduser() / "json_2.1.1"
    from evoharness_rl.envs.alfworld.prepare import generated_root, is_prepared

    root = generated_root(env_cfg)
    if not is_prepared(root):
        raise DataLayoutError(
            f"no ALFWorld games at {root}: run `evoharness-rl prepare env=alfworld` to generate them, "
            "or point env.data_path (or $ALFWORLD_DATA) at data in the official layout "
            f"{gamefile.EXPECTED_LAYOUT}"
        )
    return root


def check_layout(root: Path) -> None:
    """Raise DataLayoutError unless `root` has at least one split folder."""
    if not root.is_dir():
        raise DataLayoutError(
            f"ALFWorld data folder {root} does not exist; expected the layout {gamefile.EXPECTED_LAYOUT}"
        )
    if any((root / split).is_dir() for split in gamefile.SPLITS):
        return
    hint = ""
    if root.name in gamefile.SPLITS:
        hint = f" ({root} looks like a split folder itself: point at its parent {root.parent})"
    elif (root / "json_2.1.1").is_dir():
        hint = f" (point at {root / 'json_2.1.1'} instead)"
    raise DataLayoutError(
        f"{root} is not in the ALFWorld layout: no train/valid_seen/valid_unseen folder; "
        f"expected {gamefile.EXPECTED_LAYOUT}{hint}"
    )


def _objective(intro: str, game_file: Path) -> str:
    """The task text of the engine's intro ("Your task is to: put a mug in cabinet." -> "put a mug in cabinet")."""
    match = _TASK_LINE.search(intro)
    if not match:
        raise gamefile.GameFileError(
            f"{game_file}: the intro has no 'Your task is to: ...' line; "
            "the grammar must contain the task text (see alfworld's add_task_to_grammar)"
        )
    return match.group(1).strip()


class AlfworldEnv(Environment):
    """The ALFWorld adapter (one game loaded at a time; reloading the same game is skipped).

    `fast_path` (env.alfworld.fast_path): run the engine through envs/alfworld/fast_path.py (the same text, about
    4x faster steps); false runs TextWorld's own code.
    """

    def __init__(self, data_root: str | os.PathLike, fast_path: bool = True):
        self.root = Path(data_root).expanduser()
        self.fast_path = fast_path
        self._planner = fast_path_module.Planner()  # the planner library every game of this env is loaded into
        check_layout(self.root)
        self.spec = alfworld_spec()
        self._task_ids: dict[str, list[str]] = {}
        self._engine: Any = None
        self._loaded: str | None = None  # task id of the game the engine holds
        self._last: StepResult | None = None
        self._world: World | None = None
        self._task: Task | None = None

    @classmethod
    def from_config(cls, env_cfg: Any) -> "AlfworldEnv":
        return cls(resolve_data_root(env_cfg), fast_path=env_cfg.alfworld.fast_path)

    # -- tasks --------------------------------------------------------------------------

    def task_ids(self, split: str) -> list[str]:
        if split not in gamefile.SPLITS:
            raise ValueError(f"ALFWorld has no split {split!r}; splits: {', '.join(gamefile.SPLITS)}")
        if split not in self._task_ids:
            split_dir = self.root / split
            if not split_dir.is_dir():
                raise DataLayoutError(f"{split_dir} does not exist; expected the layout {gamefile.EXPECTED_LAYOUT}")
            games = [g for g in gamefile.find_games(split_dir) if gamefile.marked_solvable(g)]
            self._task_ids[split] = sorted(str(g.relative_to(self.root)) for g in games)
        return list(self._task_ids[split])

    def task_family(self, task_id: str) -> str:
        return gamefile.read_traj_data(self.root / task_id)["task_type"]

    # -- episode --------------------------------------------------------------------------

    def reset(self, task_id: str, seed: int = 0) -> tuple[Task, StepResult]:
        game_dir = self.root / task_id
        traj = gamefile.read_traj_data(game_dir)
        if self._loaded != task_id:
            gamefile.read_game(game_dir)  # clear errors for malformed files before the engine sees them
            self._load(game_dir / gamefile.GAME_FILE)
            self._loaded = task_id
        with gamefile.keep_argv(), fast_path_module.active(self.fast_path):
            state = self._engine.reset()
        self._task = Task(
            task_id=task_id,
            family=traj["task_type"],
            objective=_objective(state["feedback"], game_dir / gamefile.GAME_FILE),
            split=task_id.split("/", 1)[0],
            info={"pddl_params": traj["pddl_params"], "gamefile": str(game_dir / gamefile.GAME_FILE)},
        )
        self._world = World.from_facts(state["_facts"], state["_entity_infos"])
        self._last = self._result(state, invalid=False)
        return self._task, self._last

    def step(self, action: str) -> StepResult:
        if self._engine is None or self._last is None:
            raise RuntimeError("step() before reset(): call reset(task_id) first")
        command = action if isinstance(action, str) else str(action)
        admissible = command.strip() in self._last.admissible_actions
        with fast_path_module.active(self.fast_path):
            state, _, _ = self._engine.step(command)
        self._last = self._result(state, invalid=not admissible)
        return self._last

    def _result(self, state: Any, invalid: bool) -> StepResult:
        won = bool(state["won"])
        return StepResult(
            observation=state["feedback"],
            admissible_actions=list(state["admissible_commands"]),
            done=won,
            won=won,
            score=1.0 if won else 0.0,
            invalid=invalid,
        )

    def _load(self, game_file: Path) -> None:
        import textworld
        from alfworld.agents.environment.alfred_tw_env import AlfredDemangler, AlfredInfos

        self.close()
        infos = textworld.EnvInfos(won=True, admissible_commands=True, extras=["gamefile"])
        try:
            with gamefile.keep_argv(), fast_path_module.active(self.fast_path, self._planner):
                self._engine = textworld.start(str(game_file), infos, wrappers=[AlfredDemangler(), AlfredInfos])
        except Exception as err:  # parser/translator errors of many kinds: report them against the file
            raise gamefile.GameFileError(
                f"{game_file}: the engine cannot load this game ({type(err).__name__}: {str(err)[:300]}); "
                "check pddl_problem and grammar"
            ) from err

    # -- grounding -------------------------------------------------------------------------

    def make_belief(self) -> AlfworldBelief:
        return AlfworldBelief()

    def make_teacher(self, enabled_verbs: tuple[str, ...], harness_rate: float, rng: random.Random) -> AlfworldTeacher:
        if self._task is None or self._world is None:
            raise RuntimeError("make_teacher() before reset(): the teacher plans from the game's initial state")
        return AlfworldTeacher(self._task, self._world, enabled_verbs, harness_rate, rng)

    def close(self) -> None:
        if self._engine is not None:
            self._engine.close()
        self._engine = None
        self._loaded = None
