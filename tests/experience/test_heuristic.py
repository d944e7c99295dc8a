"""Heuristic consolidation on synthetic ALFWorld-style trajectories (real engine phrasing)."""

import random

import pytest

from evoharness_rl.envs.alfworld.grounding import AlfworldGrounding
from evoharness_rl.experience import ExperienceBank, HeuristicConsolidator, consolidate
from evoharness_rl.experience.consolidation import Evidence
from evoharness_rl.rollout.trajectory import Trajectory, Turn
from tests.experience import synthetic

COOL, HEAT, SIMPLE = "pick_cool_then_place_in_recep", "pick_heat_then_place_in_recep", "pick_and_place_simple"


def heuristic():
    return HeuristicConsolidator(AlfworldGrounding())


def hand_episode(won=True):
    """A short ALFWorld episode written out by hand (engine phrasing)."""
    steps = [
        ("env", "go to countertop 1", "You arrive at countertop 1. On the countertop 1, you see a apple 1, a kettle 2, and a mug 1."),
        ("env", "go to cabinet 2", "You arrive at cabinet 2. The cabinet 2 is closed."),
        ("env", "open cabinet 2", "You open the cabinet 2. The cabinet 2 is open. In it, you see a mug 2."),
        ("env", "take mug 2 from cabinet 2", "You pick up the mug 2 from the cabinet 2."),
        ("harness", "where to find mug", "[srch-001] Where to find mug: shelf first"),  # advice, not an observation
        ("env", "go to shelf 1", "You arrive at shelf 1. On the shelf 1, you see nothing."),
        ("env", "move mug 2 to shelf 1", "You move the mug 2 to the shelf 1."),
    ]
    turns = [Turn(i, [], "", kind, action, verb="recall" if kind == "harness" else None, observation=obs)
             for i, (kind, action, obs) in enumerate(steps)]
    notes = ["The apple was on the shelf", "mug is not on countertop", "kettle usually on stoveburner 1"]
    return Trajectory(task_id="hand", family=SIMPLE, env="alfworld", turns=turns, won=won, notes=notes, steps=len(turns))


def test_counts_from_one_episode_by_hand():
    delta, support = heuristic().count(Evidence.from_trajectories([hand_episode()], 7))
    search = {key: counts for key, counts in delta.items() if key.startswith("search/")}
    # observations: countertop holds apple, kettle, mug; cabinet holds mug; the note adds apple@shelf
    # ("not on countertop" is negated; stoveburner was never seen in this episode, so that note is ignored)
    assert search == {"search/apple": {"countertop": 1, "shelf": 1}, "search/kettle": {"countertop": 1},
                      "search/mug": {"cabinet": 1, "countertop": 1}}
    assert delta[f"procedure/{SIMPLE}"] == {"take OBJ from RECEP > move OBJ to RECEP": 1}
    assert delta[f"episodes/{SIMPLE}"] == {"won": 1} and f"failure/{SIMPLE}" not in delta
    assert support["search/mug"] == ["u7/e0:hand"]


def test_failed_episode_adds_observations_but_no_procedure():
    delta, _ = heuristic().count(Evidence.from_trajectories([hand_episode(won=False)], 1))
    assert "search/mug" in delta and f"procedure/{SIMPLE}" not in delta


def test_learns_search_priorities_procedures_workflow_and_mistakes():
    bank = ExperienceBank()
    trajs = synthetic.batch(48, mistakes={SIMPLE: "put", COOL: "put"})
    report = consolidate(bank, trajs, heuristic())
    snap = bank.snapshot()
    for obj, prior in synthetic.PRIORS.items():
        text, ids = snap.recall(f"where to find {obj}", SIMPLE, 3)
        assert ids and text.split(": ", 1)[1].startswith(max(prior, key=prior.get)), text
    procedure = bank.find(f"task:{HEAT}", "procedure", HEAT)
    assert procedure.principle == "Procedure for pick heat then place in recep: take OBJ from RECEP > heat OBJ with microwave > move OBJ to RECEP"
    workflow = bank.find("general", "workflow")
    assert workflow.principle.endswith("take OBJ from RECEP > move OBJ to RECEP") and len(workflow.task_types) == 4
    put = bank.find("mistakes", "invalid:put X in X")  # seen in 2 families -> one general mistake
    assert put.how_to_avoid == "place objects with 'move X to Y'" and put.task_types == [SIMPLE, COOL]
    assert report.ops["add"] == len(bank.active()) and report.failure_count == 0


def test_same_evidence_in_any_order_gives_the_same_bank_and_hash():
    first, second = synthetic.batch(15, mistakes={SIMPLE: "put"}), synthetic.batch(15, seed=1, mistakes={HEAT: "wander"})
    hashes = set()
    for seed in range(4):  # workers finish in a different order every time
        rng = random.Random(seed)
        bank = ExperienceBank()
        for batch in (first, second):
            consolidate(bank, rng.sample(batch, len(batch)), heuristic())
        hashes.add(bank.content_hash())
    assert len(hashes) == 1


def test_new_evidence_updates_an_entry_and_agreeing_evidence_is_skipped():
    bank = ExperienceBank()
    first = [_sighting("kettle 1", "stoveburner 1", i) for i in range(6)] + [_sighting("kettle 1", "countertop 1", i) for i in range(3)]
    assert consolidate(bank, first, heuristic()).ops["add"] == 1
    kettle = bank.find("search", "kettle")
    assert kettle.principle == "Where to find kettle: stoveburner first, then countertop"
    again = consolidate(bank, [_sighting("kettle 1", "stoveburner 2", i) for i in range(2)], heuristic())
    assert again.ops == {"add": 0, "update": 0, "archive": 0, "skip": 1}
    moved = [_sighting("kettle 1", "shelf 1", i) for i in range(10)]  # 10 shelf vs 8 stoveburner vs 3 countertop
    report = consolidate(bank, moved, heuristic())
    kettle = bank.entries[kettle.id]
    assert report.ops["update"] == 1 and kettle.principle == "Where to find kettle: shelf first, then stoveburner, countertop"
    assert kettle.history[-1]["before"] == {"principle": "Where to find kettle: stoveburner first, then countertop"}
    assert bank.statistics["search/kettle"] == {"countertop": 3, "shelf": 10, "stoveburner": 8}


def test_advice_that_keeps_preceding_failures_is_archived():
    bank = ExperienceBank()
    consolidate(bank, synthetic.batch(12, families=(SIMPLE, HEAT)), heuristic())
    procedure = bank.find(f"task:{HEAT}", "procedure", HEAT)
    # 4 heat episodes recalled the procedure and failed; 4 heat episodes without it succeeded
    recalled = [_outcome(HEAT, i, won=False, recalled=[procedure.id]) for i in range(4)]
    others = [_outcome(HEAT, 10 + i, won=True) for i in range(4)]
    report = consolidate(bank, recalled + others, heuristic())
    entry = bank.entries[procedure.id]
    assert entry.status == "archived" and report.ops["archive"] == 1
    assert "recalled in 4 episodes since its last edit and 4 failed" in entry.history[-1]["reason"]
    assert entry.usage == 4


def test_failures_that_are_just_a_hard_family_do_not_archive():
    bank = ExperienceBank()
    consolidate(bank, synthetic.batch(12, families=(SIMPLE, HEAT)), heuristic())
    procedure = bank.find(f"task:{HEAT}", "procedure", HEAT)
    batch = [_outcome(HEAT, i, won=False, recalled=[procedure.id] if i < 4 else []) for i in range(8)]
    consolidate(bank, batch, heuristic())
    assert bank.entries[procedure.id].status == "active"  # episodes without it failed as often


def test_table4_dynamics_add_first_then_skip_or_update():
    bank = ExperienceBank()
    reports = [consolidate(bank, synthetic.batch(24, seed=s, mistakes={SIMPLE: "put", COOL: "put"}), heuristic()) for s in range(4)]
    assert reports[0].ops["add"] > 0 and reports[0].ops["skip"] == 0
    assert all(r.ops["add"] == 0 for r in reports[1:]) and all(r.ops["skip"] > 0 for r in reports[1:])
    assert [h["update"] for h in bank.ops_history] == [1, 2, 3, 4]


def test_recall_following_agent_needs_fewer_steps_with_the_evolved_bank():
    bank = ExperienceBank()
    for seed in range(3):
        consolidate(bank, synthetic.batch(24, seed=seed, experience=bank.snapshot()), heuristic())
    empty, evolved = ExperienceBank().snapshot(), bank.snapshot()
    targets = sorted(synthetic.PRIORS)

    def mean_env_steps(snapshot):
        trajs = [synthetic.episode(SIMPLE, t, 100 + i, experience=snapshot) for i in range(40) for t in targets]
        won = [t for t in trajs if t.won]
        return sum(sum(turn.action_kind == "env" for turn in t.turns) for t in won) / len(won)

    assert mean_env_steps(evolved) < 0.8 * mean_env_steps(empty)


# ----------------------------------------------------------------------------- helpers


def _sighting(obj, recep, i):
    traj = Trajectory(task_id=f"t{i}", family=SIMPLE, env="alfworld", won=True)
    traj.turns = [Turn(0, [], "", "env", f"go to {recep}", observation=f"You arrive at {recep}. On the {recep}, you see a {obj}.")]
    return traj


def _outcome(family, i, won, recalled=()):
    traj = synthetic.episode(family, "apple", 500 + i)
    traj.won, traj.recalled_ids = won, list(recalled)
    return traj


def test_update_index_must_move_forward():
    bank = ExperienceBank()
    consolidate(bank, synthetic.batch(2), heuristic(), update_index=0)  # GRPO's first update may be 0
    consolidate(bank, synthetic.batch(2), heuristic(), update_index=5)
    with pytest.raises(ValueError, match="update_index=5 is not after"):
        consolidate(bank, synthetic.batch(2), heuristic(), update_index=5)  # a resumed run replaying a batch
    assert [h["update"] for h in bank.ops_history] == [0, 5]
