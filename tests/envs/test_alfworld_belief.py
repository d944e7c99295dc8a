"""ALFWorld Belief on real engine observations (the hand-written game) and on engine sentences."""

import pytest

pytest.importorskip("alfworld")

from evoharness_rl.envs.alfworld.adapter import AlfworldEnv  # noqa: E402
from evoharness_rl.envs.alfworld.belief import AlfworldBelief  # noqa: E402
from evoharness_rl.envs.base import StepResult, Task  # noqa: E402
from tests.envs.conftest import HAND_REL  # noqa: E402


@pytest.fixture
def played(hand_root):
    """Belief after a real episode prefix: look in the cabinet, take its mug, clean it at the sink."""
    env = AlfworldEnv(hand_root)
    task, first = env.reset(HAND_REL)
    belief = env.make_belief()
    belief.reset(task, first)

    def act(command):
        result = env.step(command)
        belief.update(command, result)
        return result

    yield belief, act
    env.close()


def test_receptacles_come_from_the_intro(played):
    belief, _ = played
    assert sorted(belief.receptacles) == ["cabinet 1", "countertop 1", "fridge 1", "microwave 1", "sinkbasin 1"]
    assert belief.unsearched() == ["cabinet 1", "countertop 1", "fridge 1", "microwave 1", "sinkbasin 1"]
    assert (belief.goal.obj, belief.goal.recep, belief.goal.verb) == ("mug", "microwave", "clean")


def test_locations_states_and_inventory_follow_the_engine(played):
    belief, act = played
    act("go to cabinet 1")
    assert belief.location == "cabinet 1" and belief.receptacles["cabinet 1"].status == "closed"
    assert not belief.receptacles["cabinet 1"].searched
    act("open cabinet 1")
    assert belief.receptacles["cabinet 1"].searched and belief.receptacles["cabinet 1"].contents == {"mug 2"}
    assert belief.objects["mug 2"].location == "cabinet 1"
    act("take mug 2 from cabinet 1")
    assert belief.holding == ["mug 2"] and belief.objects["mug 2"].location == "held"
    assert belief.receptacles["cabinet 1"].contents == set()
    act("go to sinkbasin 1")
    act("clean mug 2 with sinkbasin 1")
    assert belief.objects["mug 2"].states == {"clean"}
    act("inventory")
    assert belief.holding == ["mug 2"]
    act("go to countertop 1")
    assert belief.objects["mug 1"].location == "countertop 1"
    act("move mug 2 to countertop 1")
    assert belief.placed == {"mug 2": "countertop 1"} and belief.holding == []
    act("put mug 1 in microwave 1")  # not an ALFWorld command
    assert belief.failed == 1


def test_track_is_fuzzy_read_only_and_lists_searched_places(played):
    belief, act = played
    for command in ("go to countertop 1", "go to cabinet 1", "open cabinet 1", "take mug 2 from cabinet 1"):
        act(command)
    before = belief.render()
    for query in ("mug", "mugs", "the mug", "Mug"):
        answer = belief.track(query)
        assert "mug 1: in/on countertop 1" in answer and "mug 2: held by you" in answer, query
    assert belief.track("mug 1").startswith("mug 1: in/on countertop 1")
    apple = belief.track("apple")
    assert apple.startswith("No apple seen yet.")
    assert "Searched (no apple there now): cabinet 1, countertop 1" in apple
    assert "Not searched yet: fridge 1, microwave 1, sinkbasin 1" in apple
    assert belief.track("cabinet") == "cabinet 1, open: searched, contains nothing"
    assert belief.track("fridge 1") == "fridge 1: not visited"
    assert "holding: mug 2" in belief.track("inventory")
    assert belief.track("zebra").startswith("Nothing matches 'zebra'")
    assert belief.track("") == before == belief.render()  # track never changes the state


def test_render_is_compact(played):
    belief, act = played
    for command in ("go to countertop 1", "take mug 1 from countertop 1"):
        act(command)
    view = belief.render().splitlines()
    assert view[0] == "Location: countertop 1 | Holding: mug 1"
    assert view[2] == "Searched: countertop 1"
    assert len(view) == 4


def test_auto_progress_marks_found_taken_cleaned_placed(played):
    belief, act = played
    assert belief.auto_progress() == [("find mug", False), ("take mug", False), ("clean mug with sinkbasin", False),
                                      ("put mug in microwave", False)]
    plan = ["go to countertop 1", "take mug 1 from countertop 1", "go to sinkbasin 1", "clean mug 1 with sinkbasin 1",
            "go to microwave 1", "open microwave 1", "move mug 1 to microwave 1"]
    done_after = []
    for command in plan:
        act(command)
        done_after.append(sum(done for _, done in belief.auto_progress()))
    assert done_after == [1, 2, 2, 3, 3, 3, 4]


def _belief(family, params, objective, intro="you see a desk 1, a sidetable 1, and a shelf 1."):
    belief = AlfworldBelief()
    task = Task("t", family, objective, info={"pddl_params": params} if params else {})
    belief.reset(task, StepResult(f"Looking quickly around you, {intro}\n\nYour task is to: {objective}.", []))
    return belief


def test_look_and_pick_two_progress_from_engine_sentences():
    params = {"object_target": "Book", "parent_target": "", "toggle_target": "DeskLamp"}
    belief = _belief("look_at_obj_in_light", params, "examine the book with the desklamp")
    shelf = "You arrive at shelf 1. On the shelf 1, you see a book 2, and a cd 1."
    belief.update("go to shelf 1", StepResult(shelf, []))
    belief.update("take book 2 from shelf 1", StepResult("You pick up the book 2 from the shelf 1.", []))
    belief.update("go to desk 1", StepResult("You arrive at desk 1. On the desk 1, you see a desklamp 1.", []))
    belief.update("use desklamp 1", StepResult("You turn on the desklamp 1.", []))
    assert all(done for _, done in belief.auto_progress())
    assert "desklamp 1: in/on desk 1" in belief.track("desk lamp") and "on" in belief.objects["desklamp 1"].states

    two = _belief("pick_two_obj_and_place", None, "put two cd in shelf")
    assert (two.goal.obj, two.goal.recep, two.goal.count) == ("cd", "shelf", 2)
    two.update("go to desk 1", StepResult("You arrive at desk 1. On the desk 1, you see a cd 1, and a cd 3.", []))
    two.update("take cd 1 from desk 1", StepResult("You pick up the cd 1 from the desk 1.", []))
    two.update("go to shelf 1", StepResult("You arrive at shelf 1. On the shelf 1, you see nothing.", []))
    two.update("move cd 1 to shelf 1", StepResult("You move the cd 1 to the shelf 1.", []))
    assert [done for _, done in two.auto_progress()] == [True, True, False]


def test_objects_that_vanish_from_a_receptacle_lose_their_location():
    belief = _belief("pick_and_place_simple", None, "put a cd in shelf")
    belief.update("go to desk 1", StepResult("You arrive at desk 1. On the desk 1, you see a cd 1.", []))
    belief.update("examine desk 1", StepResult("On the desk 1, you see nothing.", []))
    assert belief.objects["cd 1"].location == ""
    assert "location unknown" in belief.track("cd")
    belief.update("examine cd 1", StepResult("This is a hot and clean cd 1.", []))
    assert belief.objects["cd 1"].states == {"hot", "clean"}


@pytest.mark.parametrize("family, text, goal", [
    ("pick_heat_then_place_in_recep", "microwave a potato and place it in the countertop",
     ("potato", "countertop", "")),
    ("pick_clean_then_place_in_recep", "put a clean mug in microwave", ("mug", "microwave", "")),
    ("look_at_obj_in_light", "look at the vase in the light of the floorlamp", ("vase", "", "floorlamp")),
    ("pick_two_obj_and_place", "find two cellphone and put them in coffeetable", ("cellphone", "coffeetable", "")),
])
def test_goal_is_read_from_the_task_text_when_params_are_missing(family, text, goal):
    from evoharness_rl.envs.alfworld.belief import goal_from_task

    parsed = goal_from_task(Task("t", family, text))
    assert (parsed.obj, parsed.recep, parsed.lamp) == goal
