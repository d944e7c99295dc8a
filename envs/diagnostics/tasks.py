"""The diagnostic tasks behind the environment contract (see the package docstring for the design).

    env = make_diagnostics_env(env_cfg)             # env.name=diagnostics; knobs in env.diagnostics
    env.task_ids("train")                           # "<task>/<variant>/<split>/<index>" for every task and variant
    task, first = env.reset("memory/needed/train/3")
    env.step("continue")

Every task is a small state machine, so a reset costs microseconds and an episode a few turns.
"""

from __future__ import annotations

import functools
import random
from dataclasses import fields
from typing import Any, Optional

from evoharness_rl.envs.base import Environment, StepResult, Task, Teacher
from evoharness_rl.envs.diagnostics.belief import DiagnosticsBelief
from evoharness_rl.envs.diagnostics.prompts import DIAGNOSTICS_SPEC
from evoharness_rl.config import DIAGNOSTIC_TASKS as TASKS, DIAGNOSTIC_VARIANTS as VARIANTS, DiagnosticsConfig
from evoharness_rl.errors import UserError

VERB_OF = {"memory": "track", "progress": "commit", "experience": "recall"}
SPLITS = ("train", "valid_seen", "valid_unseen")
CODES = ("red", "blue", "green", "amber", "violet", "white", "black", "pink")
SWITCHES = ("alpha", "beta", "gamma", "delta", "sigma", "omega")
DOORS = ("oak", "iron", "glass", "stone", "brass", "cedar", "jade", "pearl")
# 64 vault names; world w plays `experience_vaults` (at most 32) of the half of them that world w+1 does not.
VAULTS = tuple(random.Random("vaults").sample(
    [f"{a}-{b}" for a in ("north", "south", "east", "west", "upper", "lower", "inner", "outer")
     for b in ("hall", "tower", "gate", "cellar", "court", "yard", "keep", "crypt")], 64))
CONTINUE = "continue"


def make_diagnostics_env(env_cfg: Any = None) -> "DiagnosticsEnv":
    """The registry's builder: reads `env_cfg.diagnostics` (the defaults when absent)."""
    section = getattr(env_cfg, "diagnostics", None)
    if section is None:
        return DiagnosticsEnv()
    return DiagnosticsEnv(DiagnosticsConfig(**{f.name: getattr(section, f.name) for f in fields(DiagnosticsConfig)}))


def split_task_id(task_id: str) -> tuple[str, str, str, int]:
    """"memory/needed/train/3" -> ("memory", "needed", "train", 3); one clear error for anything else."""
    parts = task_id.split("/")
    if len(parts) != 4 or parts[0] not in TASKS or parts[1] not in VARIANTS or parts[2] not in SPLITS \
            or not parts[3].isdigit():
        raise UserError(f"{task_id!r} is not a diagnostics task id; expected <task>/<variant>/<split>/<index> with "
                        f"task in {', '.join(TASKS)}, variant in {', '.join(VARIANTS)}, split in {', '.join(SPLITS)}")
    return parts[0], parts[1], parts[2], int(parts[3])


def world_vaults(settings: DiagnosticsConfig) -> list[str]:
    """The vaults of `settings.experience_world`: half of the name pool, disjoint from the vaults of worlds w-1 and w+1 (the doors are drawn anew for every world)."""
    return _half(settings.experience_world)[: settings.experience_vaults]


def _half(world: int) -> list[str]:
    start = (world % 2) * len(VAULTS) // 2
    return [VAULTS[(start + i) % len(VAULTS)] for i in range(len(VAULTS) // 2)]


@functools.lru_cache(maxsize=64)
def _door_order(world: int) -> dict[str, int]:
    """Each of the world's 32 vault names -> its place in a shuffle of them that is the world's own."""
    return {vault: i for i, vault in enumerate(random.Random(f"doors:{world}").sample(_half(world), len(VAULTS) // 2))}


def vault_door(settings: DiagnosticsConfig, vault: str) -> str:
    """The door that opens in `vault`: fixed per vault and world (the hidden rule of its family).

    Balanced: over a world's 32 vaults every door opens in equally many (as nearly as the count of doors
    allows), so no order of doors beats chance without knowing the vault. Drawn independently per vault,
    world 1 had oak and stone behind 22 of 32 vaults, and trying those two won 0.69 without a recall."""
    doors = DOORS[: settings.experience_doors]
    return doors[_door_order(settings.experience_world)[vault] % len(doors)]


class _Game:
    """One episode's state machine; subclasses implement the three tasks."""

    def __init__(self, settings: DiagnosticsConfig, control: bool, rng: random.Random):
        self.settings, self.control, self.rng = settings, control, rng
        self.moves = 0  # environment actions taken

    family: str
    objective: str
    budget: int  # the episode's step budget: its moves plus the harness calls it needs
    spare: int  # harness calls the budget allows

    def first(self) -> StepResult: ...

    def act(self, action: str) -> StepResult: ...

    def answer(self) -> str:
        """The action an oracle takes now (the teacher's move)."""

    def at_decision(self) -> bool:
        """Whether the turn now is where the task's verb helps (needed variant) or would have (control)."""


class _Memory(_Game):
    """A code shown once, then `memory_delay` corridor steps, then a keypad that asks for it."""

    def __init__(self, settings, control, rng):
        super().__init__(settings, control, rng)
        self.codes = CODES[: settings.memory_codes]
        self.code = rng.choice(self.codes)
        self.family = f"memory-{'control' if control else 'needed'}"
        self.objective = "remember the code on the note and enter it at the keypad"
        self.spare = 2  # the call at the keypad, and one wasted call
        self.budget = settings.memory_delay + 2 + self.spare

    def first(self) -> StepResult:
        return StepResult(f"A note on the wall shows the code {self.code}. A corridor leads on.", [CONTINUE])

    def at_decision(self) -> bool:
        return self.moves == self.settings.memory_delay + 1

    def _view(self) -> StepResult:
        if self.at_decision():
            text = "A keypad by the door asks for the code."
            if self.control:
                text += f" The note beside it says {self.code}."
            return StepResult(text, [f"enter {c}" for c in self.codes])
        return StepResult("You walk along the corridor.", [CONTINUE])

    def act(self, action: str) -> StepResult:
        if self.at_decision():
            if not action.startswith("enter ") or action[6:] not in self.codes:
                return _invalid(action, self._view())
            won = action[6:] == self.code
            text = "The door opens." if won else "Wrong code: the keypad locks."
            return StepResult(text, [], done=True, won=won, score=float(won))
        if action != CONTINUE:
            return _invalid(action, self._view())
        self.moves += 1
        return self._view()

    def answer(self) -> str:
        return f"enter {self.code}" if self.at_decision() else CONTINUE


class _Progress(_Game):
    """Switches to turn on once each; panels `progress_gap` corridor steps apart.

    Each panel offers one switch still off, drawn at random, among those already on (shuffled), so
    which switches are done is the episode's own history, not a fixed order a policy could learn. The
    turn after a switch goes on names the switches still off, first: keeping track is a copy (commit them,
    and the plan shows them at the next panel), not a set difference, which a model of a million
    parameters does not learn at this budget."""

    def __init__(self, settings, control, rng):
        super().__init__(settings, control, rng)
        self.switches = rng.sample(SWITCHES, settings.progress_switches)
        self.on: list[str] = []
        self.walk = 0  # corridor steps left before the next panel
        self.just_on = ""  # the switch turned on by the last move (shown until the next move)
        self.offer: list[str] = []  # the switches of the current panel
        k, gap = len(self.switches), settings.progress_gap
        self.family = f"progress-{'control' if control else 'needed'}"
        self.objective = f"turn on each switch ({', '.join(self.switches)}) exactly once; a switch turned on twice " \
                         "trips the breaker"
        self.spare = k  # a commit after each switch but the last, and one wasted call
        self.budget = k + (k - 1) * gap + self.spare

    def first(self) -> StepResult:
        return self._arrive()

    def _off(self) -> list[str]:
        return [s for s in self.switches if s not in self.on]

    def _arrive(self) -> StepResult:
        self.offer = [self.rng.choice(self._off())] + self.on
        self.rng.shuffle(self.offer)
        return self._panel()

    def _panel(self) -> StepResult:
        text = f"A panel with switch{'es' if len(self.offer) > 1 else ''} {', '.join(self.offer)}."
        if self.control:
            text += f" Still off: {' and '.join(self._off())}."
        return StepResult(text, [f"turn on {s}" for s in self.offer])

    def at_decision(self) -> bool:
        return bool(self.just_on)

    def _here(self) -> StepResult:
        if self.just_on:
            # What is left comes first: a policy that copies the first switch it reads (as it does at a panel) then
            # commits the right one (worded "Switch X is now on; Y still off", 13 of 29 SFT commits named X).
            text = f"Still off: {' and '.join(self._off())}. Switch {self.just_on} is now on; you walk to the next panel."
            if self.control:  # the decision point must show that nothing needs keeping: the next panel will say it
                text += " Its sign lists the switches still off."
            return StepResult(text, [CONTINUE])
        return self._corridor() if self.walk else self._panel()

    def act(self, action: str) -> StepResult:
        if self.walk:
            if action != CONTINUE:
                return _invalid(action, self._here())
            self.moves += 1
            self.walk -= 1
            self.just_on = ""
            return self._corridor() if self.walk else self._arrive()
        switch = action[8:] if action.startswith("turn on ") else ""
        if switch not in self.offer:
            return _invalid(action, self._here())
        self.moves += 1
        if switch in self.on:
            return StepResult(f"Switch {switch} was already on: the breaker trips.", [], done=True)
        self.on.append(switch)
        if not self._off():
            return StepResult("All switches are on: the lights come up.", [], done=True, won=True, score=1.0)
        self.walk, self.just_on = self.settings.progress_gap, switch
        return self._here()

    def _corridor(self) -> StepResult:
        return StepResult("You walk along the corridor.", [CONTINUE])

    def answer(self) -> str:
        return CONTINUE if self.walk else f"turn on {next(s for s in self.offer if s not in self.on)}"


class _Experience(_Game):
    """A vault whose opening door is the same in every episode of the vault (the family) and never shown.

    A world (`experience_world`) is a set of vaults with their doors: collect in one world and train and
    evaluate in another, and no weights can carry a vault's door over; only the Experience bank, which
    learns it from the episodes, can."""

    def __init__(self, settings, control, rng):
        super().__init__(settings, control, rng)
        self.doors = DOORS[: settings.experience_doors]
        self.vault = rng.choice(world_vaults(settings))
        self.door = vault_door(settings, self.vault)
        self.family = f"vault-{self.vault}"
        self.objective = f"open the door of the {self.vault} vault that is not locked"
        self.budget, self.spare = 2, 1  # a recall and one door, or two doors: no step for a wasted call

    def first(self) -> StepResult:
        text = f"You stand before the {self.vault} vault. Its doors: {', '.join(self.doors)}."
        if self.control:
            text += f" A sign says the {self.door} door opens."
        return StepResult(text, self._actions())

    def _actions(self) -> list[str]:
        return [f"open {d} door" for d in self.doors]

    def at_decision(self) -> bool:
        return self.moves == 0

    def act(self, action: str) -> StepResult:
        door = action[5:-5] if action.startswith("open ") and action.endswith(" door") else ""
        if door not in self.doors:
            return _invalid(action, StepResult("The vault's doors wait.", self._actions()))
        self.moves += 1
        if door == self.door:
            return StepResult(f"The {door} door swings open.", [], done=True, won=True, score=1.0)
        if self.moves >= self.settings.experience_tries:
            return StepResult(f"The {door} door is locked, and the vault seals.", [], done=True, won=False, score=0.0)
        return StepResult(f"The {door} door is locked.", self._actions())

    def answer(self) -> str:
        return f"open {self.door} door"


_GAMES = {"memory": _Memory, "progress": _Progress, "experience": _Experience}


def _invalid(action: str, state: StepResult) -> StepResult:
    shown = action if len(action) <= 60 else action[:57] + "..."
    reason = f"'{shown}' is not an available action"
    return StepResult(f"Invalid action: {reason}. {state.observation}", state.admissible_actions, invalid=True,
                      info={"reason": reason})


class DiagnosticsEnv(Environment):
    spec = DIAGNOSTICS_SPEC

    def __init__(self, settings: Optional[DiagnosticsConfig] = None):
        self.settings = settings or DiagnosticsConfig()
        self.game: Optional[_Game] = None
        self.task: Optional[Task] = None

    def task_ids(self, split: str) -> list[str]:
        if split not in SPLITS:
            raise UserError(f"split={split!r} does not exist for env.name=diagnostics; use one of {', '.join(SPLITS)}")
        count = self.settings.train_tasks if split == "train" else self.settings.valid_tasks
        # Index-major, so that any window of consecutive tasks mixes every task and variant (collect's online bank
        # learns the vaults' doors in its first window, not its last).
        return [f"{task}/{variant}/{split}/{i}" for i in range(count) for task in self.settings.tasks
                for variant in self.settings.variants]

    def task_family(self, task_id: str) -> str:
        return self._game(task_id).family

    def _game(self, task_id: str, seed: int = 0) -> _Game:
        task, variant, split, index = split_task_id(task_id)
        # Progress's panels are drawn anew for each reset seed (GRPO gives every update's group another): with the
        # same panels in every episode of a task, GRPO learned its 64 training tasks' answers by heart instead of
        # calling `commit`. The other tasks stay fixed per task id (a vault is its task's family).
        key = f"{task}/{variant}/{split}/{index}" + (f"/{seed}" if task == "progress" and seed else "")
        return _GAMES[task](self.settings, variant == "control", random.Random(key))

    def reset(self, task_id: str, seed: int = 0) -> tuple[Task, StepResult]:
        kind, variant, split, _ = split_task_id(task_id)
        self.game = self._game(task_id, seed)
        info = {"task": kind, "variant": variant, "max_steps": self.game.budget, "verb": VERB_OF[kind]}
        self.task = Task(task_id, self.game.family, self.game.objective, split=split, info=info)
        return self.task, self.game.first()

    def step(self, action: str) -> StepResult:
        if self.game is None:
            return StepResult("Invalid action: no episode is running; reset first.", [], invalid=True)
        return self.game.act(" ".join(action.split()))

    def at_decision(self) -> bool:
        """Whether the current turn is the task's decision point (see `decision_point`)."""
        return self.game is not None and self.game.at_decision()

    def make_belief(self) -> DiagnosticsBelief:
        return DiagnosticsBelief()

    def make_teacher(self, enabled_verbs: tuple[str, ...], harness_rate: float, rng: random.Random) -> Teacher:
        from evoharness_rl.envs.diagnostics.teacher import RandomCallTeacher

        return RandomCallTeacher(self, enabled_verbs, harness_rate, rng)


def decision_point(env: DiagnosticsEnv, task_id: str, turns: list[Any], seed: int = 0) -> list[bool]:
    """For each turn of a recorded episode, whether it was taken at the task's decision point.

    The episode is replayed from its reset seed and environment actions (`turn.action_kind == "env"`),
    so any record with `action_kind` and `action` per turn will do (Trajectory turns or their JSON)."""
    env.reset(task_id, seed)
    flags = []
    for turn in turns:
        kind = turn["action_kind"] if isinstance(turn, dict) else turn.action_kind
        action = turn["action"] if isinstance(turn, dict) else turn.action
        flags.append(env.at_decision())
        if kind == "env":
            env.step(action)
    return flags
