"""ALFWorld game generator: determinism, layout on disk, splits, priors, sizes, solvability, caching."""

import functools
import json
import random
import time

import pytest

pytest.importorskip("alfworld")

from evoharness_rl.config import EnvConfig  # noqa: E402
from evoharness_rl.envs.alfworld import gamefile, generator, rooms  # noqa: E402
from evoharness_rl.envs.alfworld.prepare import DONE_MARKER, generated_root, is_prepared, prepare  # noqa: E402

COUNTS = {"train": 6, "valid_seen": 12, "valid_unseen": 12}  # what the alfworld_root fixture holds


@functools.lru_cache(maxsize=8)
def _pools(size, seed):
    return generator.layout_pools(size, seed)


def _spec(split="valid_seen", index=0, family="pick_clean_then_place_in_recep", size="small", seed=0, room=None):
    layouts = _pools(size, seed)["unseen" if split == "valid_unseen" else "seen"]
    if room:
        layouts = {room: layouts[room]}
    return generator.sample_game(split, index, family, layouts, size, seed)


def test_same_seed_same_games_other_seed_other_games():
    a = [_spec(index=i, family=f) for i, f in enumerate(rooms.FAMILIES)]
    b = [_spec(index=i, family=f) for i, f in enumerate(rooms.FAMILIES)]
    c = [_spec(index=i, family=f, seed=1) for i, f in enumerate(rooms.FAMILIES)]
    assert [s.problem() for s in a] == [s.problem() for s in b]
    assert [s.traj_data() for s in a] == [s.traj_data() for s in b]
    assert [s.problem() for s in a] != [s.problem() for s in c]


def test_generated_folder_is_the_official_layout(alfworld_root):
    for split, count in COUNTS.items():
        games = gamefile.find_games(alfworld_root / split)
        assert len(games) == count
        for game_dir in games:
            rel = game_dir.relative_to(alfworld_root / split)
            assert len(rel.parts) == 2  # <task-folder>/<trial>
            traj = gamefile.read_traj_data(game_dir)
            game = gamefile.read_game(game_dir)
            assert rel.parts[0].startswith(traj["task_type"] + "-" + traj["pddl_params"]["object_target"])
            assert set(traj["pddl_params"]) == set(gamefile.PDDL_PARAMS)
            assert traj["turk_annotations"]["anns"][0]["task_desc"]
            assert game["solvable"] is True and game["walkthrough"]
            assert game["pddl_domain"] == gamefile.domain_and_grammar()[0]
            assert "UNKNOWN GOAL" not in game["grammar"]


def test_regenerating_writes_identical_files(alfworld_root, tmp_path):
    generator.write_splits(tmp_path, {"valid_unseen": COUNTS["valid_unseen"]}, size="small", seed=0, workers=1)
    for game_dir in gamefile.find_games(alfworld_root / "valid_unseen"):
        twin = tmp_path / game_dir.relative_to(alfworld_root)
        for name in (gamefile.TRAJ_FILE, gamefile.GAME_FILE):
            assert (twin / name).read_text() == (game_dir / name).read_text()


def test_walkthroughs_win_in_the_real_engine(alfworld_root):
    """The planner's plan (made on the task-only problem) wins the full game, and only at its end."""
    from evoharness_rl.envs.alfworld.adapter import AlfworldEnv

    env = AlfworldEnv(alfworld_root)
    try:
        first_of_family = {}
        for task_id in env.task_ids("valid_seen"):
            first_of_family.setdefault(task_id.split("/")[1].split("-")[0], task_id)
        assert len(first_of_family) == len(rooms.FAMILIES)
        for task_id in first_of_family.values():
            _, result = env.reset(task_id)
            for command in gamefile.read_game(alfworld_root / task_id)["walkthrough"]:
                assert command in result.admissible_actions, (task_id, command)
                assert not result.done, f"{task_id}: won before the walkthrough ended"
                result = env.step(command)
            assert result.won and result.done, task_id
    finally:
        env.close()


def test_family_counts_follow_the_official_splits():
    assert generator.family_counts("valid_seen", 140) == rooms.FAMILY_PROPORTIONS["valid_seen"]
    assert generator.family_counts("valid_unseen", 134) == rooms.FAMILY_PROPORTIONS["valid_unseen"]
    train = generator.family_counts("train", 3000)
    assert sum(train.values()) == 3000
    assert train["pick_two_obj_and_place"] > train["look_at_obj_in_light"]  # 813 vs 308 officially
    small = generator.family_counts("valid_seen", 12)
    assert sum(small.values()) == 12 and all(n >= 1 for n in small.values())


def test_splits_layouts_and_goals(alfworld_root):
    def trajs(split):
        return [json.loads((g / gamefile.TRAJ_FILE).read_text()) for g in gamefile.find_games(alfworld_root / split)]

    def key(t):
        p = t["pddl_params"]
        return (t["generator"]["layout"], t["task_type"], p["object_target"], p["parent_target"], p["toggle_target"])

    train, seen, unseen = trajs("train"), trajs("valid_seen"), trajs("valid_unseen")
    pools = generator.layout_pools("small", 0)
    seen_ids = {layout.layout_id for room in pools["seen"].values() for layout in room}
    assert {t["generator"]["layout"] for t in train + seen} <= seen_ids
    assert not {t["generator"]["layout"] for t in unseen} & seen_ids
    assert not {key(t) for t in seen} & {key(t) for t in train}
    assert {t["task_type"] for t in seen} == set(rooms.FAMILIES)
    assert len({t["turk_annotations"]["anns"][0]["task_desc"].split()[0] for t in seen + unseen}) >= 5


def test_priors_table_is_consistent_with_alfred():
    import alfworld.gen.constants as constants

    contain = {r.lower(): {o.lower() for o in objs} for r, objs in constants.VAL_RECEPTACLE_OBJECTS.items()}
    priors = rooms.placement_priors()
    assert priors["kettle"]["stoveburner"] == max(priors["kettle"].values())
    assert max(priors["soapbar"], key=priors["soapbar"].get) in ("sinkbasin", "bathtubbasin")
    for obj, receps in priors.items():
        assert sum(receps.values()) == pytest.approx(1.0), obj
        for recep in receps:
            assert obj in ("desklamp", "floorlamp") or obj in contain[recep], (obj, recep)
    for room in rooms.ROOMS.values():
        assert all(o.lower() in priors for o in room["objects"])
    priors["kettle"]["stoveburner"] = 0.0
    assert rooms.PLACEMENT_PRIORS["kettle"]["stoveburner"] == 0.6  # placement_priors() returns a copy


@pytest.mark.parametrize("name, kind", [("mug 1", "mug"), ("Mug", "mug"), ("sinkbasin 12", "sinkbasin"),
                                        ("  Desk Lamp ", "desk lamp"), ("kettle", "kettle")])
def test_object_type(name, kind):
    assert rooms.object_type(name) == kind


def test_placements_follow_the_priors():
    """Over many kitchens, kettles start on stoveburners far more often than anywhere else."""
    where = {}
    for index in range(100):
        spec = _spec(split="train", index=index, family="pick_and_place_simple", size="large", room="kitchen")
        types = {rid: rtype for rid, rtype, _ in spec.layout.receptacles}
        for _, otype, rid, _ in spec.objects:
            if otype == "Kettle":
                where[types[rid]] = where.get(types[rid], 0) + 1
    assert sum(where.values()) > 30
    assert max(where, key=where.get) == "StoveBurner"


@pytest.mark.parametrize("size", ["small", "medium", "large"])
def test_sizes(size):
    low, high = rooms.SIZES[size]["receptacles"]
    kitchens = [generator.make_layout("kitchen", n, size, 0) for n in range(1, 6)]
    assert all(low <= len(k.receptacles) <= high for k in kitchens)
    assert all({"Fridge", "Microwave", "SinkBasin", "CounterTop"} <= k.types() for k in kitchens)
    spec = _spec(split="train", family="pick_heat_then_place_in_recep", size=size)
    assert rooms.SIZES[size]["objects"][0] <= len(spec.objects) <= rooms.SIZES[size]["objects"][1]


def test_large_game_is_verified_quickly():
    spec = _spec(split="train", family="pick_two_obj_and_place", size="large", room="kitchen")
    assert len(spec.layout.receptacles) >= 28 and len(spec.objects) >= 55
    start = time.time()
    plan = generator.Verifier("planner").solve(spec)
    assert plan and sum(c.startswith("move ") for c in plan) == 2
    assert time.time() - start < 20


def test_verifier_rejects_unsolvable_and_already_won_games():
    verifier = generator.Verifier("planner")
    spec = _spec(family="pick_and_place_simple")
    assert verifier.solve(spec)
    missing = _spec(family="pick_and_place_simple")
    missing.objects = [o for o in missing.objects if o[1] != missing.object_target]
    assert verifier.solve(missing) is None
    won = _spec(family="pick_and_place_simple")
    rid, _, loc = won.layout.of_type(won.parent_target)[0]
    won.objects = [(oid, otype, rid, loc) if otype == won.object_target else (oid, otype, r, l)
                   for oid, otype, r, l in won.objects]
    assert verifier.solve(won) is None


def test_handcoded_expert_verifies_too():
    verifier = generator.Verifier("handcoded")
    spec = _spec(family="pick_and_place_simple")
    plan = verifier.solve(spec)
    assert plan and plan[-1].startswith("move ")
    with pytest.raises(ValueError, match="planner"):
        generator.Verifier("oracle")


def test_unknown_size_and_split_are_rejected():
    with pytest.raises(ValueError, match="small"):
        generator.generate({"train": 1}, size="huge")
    with pytest.raises(ValueError, match="valid_seen"):
        generator.generate({"test": 1})


def _cfg(tmp_path, **alfworld):
    cfg = EnvConfig(data_dir=str(tmp_path))
    cfg.alfworld.train_games, cfg.alfworld.valid_seen_games, cfg.alfworld.valid_unseen_games = 2, 3, 3
    for key, value in alfworld.items():
        setattr(cfg.alfworld, key, value)
    return cfg


def test_prepare_is_cached_and_regenerates_on_new_parameters(tmp_path):
    cfg = _cfg(tmp_path)
    root = prepare(cfg, workers=1)
    assert root == generated_root(cfg) == tmp_path / "alfworld" / "small-seed0"
    manifest = json.loads((root / "manifest.json").read_text())
    assert manifest["games"] == {"train": 2, "valid_seen": 3, "valid_unseen": 3}
    assert is_prepared(root) and (root / DONE_MARKER).is_file()
    stamp = (root / DONE_MARKER).stat().st_mtime_ns
    start = time.time()
    assert prepare(cfg, workers=1) == root
    assert time.time() - start < 0.5 and (root / DONE_MARKER).stat().st_mtime_ns == stamp
    cfg.alfworld.train_games = 4
    assert prepare(cfg, workers=1) == root
    assert len(gamefile.find_games(root / "train")) == 4
    assert not list(root.parent.glob(".*tmp*"))


def test_prepare_with_two_worker_processes(tmp_path):
    root = prepare(_cfg(tmp_path, generator_seed=3), workers=2)
    assert root.name == "small-seed3"
    assert sum(len(gamefile.find_games(root / s)) for s in gamefile.SPLITS) == 8


def test_an_interrupted_generation_is_not_mistaken_for_a_finished_one(tmp_path):
    root = generated_root(_cfg(tmp_path))
    (root / "train").mkdir(parents=True)
    assert not is_prepared(root)
    rng_state = random.getstate()
    prepare(_cfg(tmp_path), workers=1)
    assert random.getstate() == rng_state  # generation never touches the global RNG
    assert is_prepared(root)
