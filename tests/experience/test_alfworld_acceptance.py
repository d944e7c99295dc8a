"""Acceptance on the real ALFWorld engine with generated games (slow; needs alfworld).

1. Heuristic consolidation over scripted-teacher traces on `train` learns the generator's
   placement priors: for every object type with a dominant prior (and enough sightings),
   the top-3 locations `recall [where to find X]` returns contain the dominant one.
   "The generator's prior" is what it realised in the games played: `rooms.PLACEMENT_PRIORS`
   renormalised over the receptacle types each layout has (a small kitchen often has no
   stoveburner, so its kettles start elsewhere), read back from the games' PDDL `inReceptacle`
   facts. The share against the raw table is printed too.
2. With a recall-following scripted policy, the evolved bank (frozen) reduces mean steps per
   successful episode on valid_unseen compared with an empty bank. The policy (`RecallSearcher`
   below) knows nothing about where things are: it recalls where to find each object it needs,
   searches receptacles in the recalled order (then in the room's listing order), and finishes
   the task with admissible commands. (The ALFWorld teacher cannot serve here: it knows every
   object's location and caps its decoy visits, so hints barely change its step count.)

Both print their numbers (run with -s to see them).
"""

from __future__ import annotations

import re

import pytest

from evoharness_rl.config import Config
from evoharness_rl.experience import ExperienceBank, consolidate, make_consolidator

pytestmark = pytest.mark.slow
pytest.importorskip("alfworld")
from evoharness_rl.envs.alfworld import prepare as prepare_module  # noqa: E402
from evoharness_rl.envs import make_env  # noqa: E402
from evoharness_rl.envs.alfworld import gamefile  # noqa: E402
from evoharness_rl.envs.alfworld.rooms import placement_priors  # noqa: E402
from evoharness_rl.eval.evaluate import run_eval  # noqa: E402
from evoharness_rl.rollout.episode import Episode, EpisodeSettings  # noqa: E402
from evoharness_rl.rollout.trajectory import Trajectory  # noqa: E402

TRAIN_EPISODES = 160  # scripted-teacher episodes consolidated into the bank
UNSEEN_EPISODES = 40  # valid_unseen episodes per bank
BATCH = 32  # episodes per consolidation (a GRPO-sized rollout batch)
MIN_SIGHTINGS = 5  # object types seen fewer times are not measured


def dominant_location(prior: dict[str, float]) -> str | None:
    """The receptacle type an object mostly starts on: share >= 0.4 and >= 0.1 above the runner-up."""
    total = sum(prior.values())
    ranked = sorted(((p / total, r) for r, p in prior.items()), reverse=True)
    runner_up = ranked[1][0] if len(ranked) > 1 else 0.0
    return ranked[0][1] if ranked[0][0] >= 0.4 and ranked[0][0] - runner_up >= 0.1 else None


_TYPED = re.compile(r"\((objectType|receptacleType) (\S+) (\w+)Type\)")
_IN = re.compile(r"\(inReceptacle (\S+) (\S+)\)")


def realised_priors(game_dirs) -> dict[str, dict[str, float]]:
    """object type -> {receptacle type: count} of initial placements in these games."""
    counts: dict[str, dict[str, float]] = {}
    for game_dir in game_dirs:
        problem = gamefile.read_game(game_dir)["pddl_problem"].split("(:goal")[0]  # initial state only
        types = {name: kind.lower() for _, name, kind in _TYPED.findall(problem)}
        for obj, recep in _IN.findall(problem):
            row = counts.setdefault(types[obj], {})
            row[types[recep]] = row.get(types[recep], 0) + 1
    return counts


def share_in_top3(bank: ExperienceBank, priors: dict[str, dict[str, float]]) -> tuple[list[str], list[str]]:
    """(object types measured, those whose dominant location is in the recalled top 3)."""
    measured, hits = [], []
    for obj, prior in sorted(priors.items()):
        dominant = dominant_location(prior)
        if dominant is None or sum(bank.statistics.get(f"search/{obj}", {}).values()) < MIN_SIGHTINGS:
            continue
        measured.append(obj)
        if dominant in recalled_top3(bank, obj):
            hits.append(obj)
    return measured, hits


def recalled_top3(bank: ExperienceBank, obj: str) -> list[str]:
    text, _ = bank.snapshot().recall(f"where to find {obj}", "pick_and_place_simple", 3)
    match = re.search(rf"Where to find {obj}: (.*)", text)
    return [w.strip() for w in re.split(r" first, then |, | first", match.group(1)) if w.strip()][:3] if match else []


def eval_cfg(root, name: str, split: str, limit: int, bank: str | None = None) -> Config:
    cfg = Config(command="eval", out_dir=str(root / name), split=split, limit=limit)
    cfg.env.name, cfg.env.data_dir = "alfworld", str(root / "data")
    cfg.env.alfworld.size, cfg.env.alfworld.train_games = "small", TRAIN_EPISODES
    cfg.env.alfworld.valid_seen_games, cfg.env.alfworld.valid_unseen_games = 12, UNSEEN_EPISODES
    cfg.policy.backend, cfg.policy.harness_rate = "scripted", 1.0
    cfg.harness.mode, cfg.logger.progress = "adaptive", False
    cfg.experience.bank, cfg.experience.evolve = bank, "frozen"
    return cfg


@pytest.fixture(scope="module")
def evolved(tmp_path_factory):
    """(root dir, bank consolidated from train traces, its path, the train games played)."""
    root = tmp_path_factory.mktemp("alfworld-experience")
    cfg = eval_cfg(root, "train", "train", TRAIN_EPISODES)
    data_root = prepare_module.prepare(cfg.env)
    trajectories = run_eval(cfg).trajectories
    bank, consolidator = ExperienceBank(), make_consolidator(cfg.experience, "alfworld")
    for start in range(0, len(trajectories), BATCH):
        consolidate(bank, trajectories[start : start + BATCH], consolidator)
    path = bank.save(root / "bank.json")
    return root, bank, path, [data_root / t.task_id for t in trajectories]


def test_heuristic_bank_learns_the_generators_placement_priors(evolved):
    _, bank, _, games = evolved
    measured, hits = share_in_top3(bank, realised_priors(games))
    share = len(hits) / len(measured) if measured else 0.0
    table_measured, table_hits = share_in_top3(bank, placement_priors())
    print(f"\nplacement priors realised in the {len(games)} games: dominant location in recalled top-3 for "
          f"{len(hits)}/{len(measured)} object types ({share:.2%}); missed: {sorted(set(measured) - set(hits))}"
          f"\nagainst the raw PLACEMENT_PRIORS table: {len(table_hits)}/{len(table_measured)} "
          f"(missed: {sorted(set(table_measured) - set(table_hits))})")
    assert len(measured) >= 8 and share >= 0.9


APPLIANCE = {"pick_clean_then_place_in_recep": ("clean", "sinkbasin"), "pick_heat_then_place_in_recep": ("heat", "microwave"),
             "pick_cool_then_place_in_recep": ("cool", "fridge")}
_ROOM = re.compile(r"Looking quickly around you, you see (.*?)\.\s")
_INSTANCE = re.compile(r"\b([a-z]+) (\d+)\b")


class RecallSearcher:
    """A scripted policy that finds objects only by searching, in the order `recall` suggests."""

    def __init__(self, task, first_observation: str):
        params = task.info["pddl_params"]
        self.family = task.family
        self.target, self.dest = params["object_target"].lower(), params["parent_target"].lower()
        self.lamp = (params.get("toggle_target") or "").lower()
        self.receptacles = [f"{t} {n}" for t, n in _INSTANCE.findall(_ROOM.search(first_observation).group(1))]
        self.seen: dict[str, str] = {}  # object instance -> receptacle where it was seen
        self.searched: set[str] = set()
        self.placed: set[str] = set()
        self.at = ""

    def script(self):
        """Yields responses; receives each action's result text."""
        for _ in range(2 if self.family == "pick_two_obj_and_place" else 1):
            obj = yield from self.find(self.target)
            yield f"<action>take {obj} from {self.at}</action>"
            if self.family in APPLIANCE:
                verb, kind = APPLIANCE[self.family]
                yield from self.go(self.first_of(kind))
                yield f"<action>{verb} {obj} with {self.at}</action>"
            if self.family == "look_at_obj_in_light":
                lamp = yield from self.find(self.lamp)
                yield f"<action>use {lamp}</action>"
                return
            yield from self.go(self.first_of(self.dest))
            yield f"<action>move {obj} to {self.at}</action>"
            self.placed.add(obj)

    def find(self, kind: str):
        result = yield f"<action>recall [where to find {kind}]</action>"
        hints = [w for w in re.findall(r"[a-z]+", result.split(":", 2)[-1]) if any(r.startswith(w + " ") for r in self.receptacles)]
        rank = {t: i for i, t in enumerate(dict.fromkeys(hints))}
        order = sorted(self.receptacles, key=lambda r: (rank.get(r.split()[0], len(rank)), self.receptacles.index(r)))
        for receptacle in order:
            known = self.known(kind)
            if known:
                yield from self.go(self.seen[known])
                return known
            if receptacle not in self.searched:
                yield from self.go(receptacle)
        return self.known(kind) or f"{kind} 1"

    def known(self, kind: str) -> str:
        return next((o for o in sorted(self.seen) if o.split()[0] == kind and o not in self.placed), "")

    def go(self, receptacle: str):
        if self.at != receptacle:
            self.observe(receptacle, (yield f"<action>go to {receptacle}</action>"))
        if "is closed" in self.last:
            self.observe(receptacle, (yield f"<action>open {receptacle}</action>"))

    def observe(self, receptacle: str, text: str) -> None:
        self.at, self.last = receptacle, text
        self.searched.add(receptacle)
        for seen_part in re.findall(r"you see (.*?)\.", text):
            for kind, n in _INSTANCE.findall(seen_part):
                self.seen.setdefault(f"{kind} {n}", receptacle)

    def first_of(self, kind: str) -> str:
        return next(r for r in self.receptacles if r.split()[0] == kind)

    last = ""


def play(env, task_id: str, snapshot, max_steps: int) -> Trajectory:
    episode = Episode(env, EpisodeSettings(mode="adaptive", max_steps=max_steps), experience=snapshot)
    episode.reset(task_id)
    script = RecallSearcher(episode.task, episode.last_env.observation).script()
    response = next(script)
    while not episode.done:
        turn = episode.step(response)
        try:
            response = script.send(turn.observation)
        except StopIteration:
            break
    return episode.record


def test_evolved_bank_shortens_successful_episodes_on_valid_unseen(evolved):
    root, bank, _, _ = evolved
    cfg = eval_cfg(root, "unseen", "valid_unseen", UNSEEN_EPISODES)
    env = make_env(cfg.env)
    tasks = env.task_ids("valid_unseen")[:UNSEEN_EPISODES]

    def mean_steps(snapshot) -> tuple[float, int]:
        won = [t for t in (play(env, task, snapshot, cfg.env.max_steps_eval) for task in tasks) if t.won]
        return sum(t.steps for t in won) / max(len(won), 1), len(won)

    try:
        empty, n_empty = mean_steps(ExperienceBank().snapshot())
        evolved_steps, n_evolved = mean_steps(bank.snapshot())
    finally:
        env.close()
    print(f"\nvalid_unseen mean steps per successful episode ({len(tasks)} tasks): empty bank {empty:.2f} "
          f"({n_empty} successes), evolved bank {evolved_steps:.2f} ({n_evolved} successes)")
    assert n_empty >= 0.8 * len(tasks) and n_evolved >= 0.8 * len(tasks) and evolved_steps < empty
