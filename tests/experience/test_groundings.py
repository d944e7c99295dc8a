"""Environment groundings for the heuristic consolidator: ALFWorld and WebShop text."""

import pytest

from evoharness_rl.envs.alfworld.grounding import AlfworldGrounding
from evoharness_rl.envs.webshop.grounding import WebShopGrounding, query_phrasing
from evoharness_rl.experience import ExperienceBank, HeuristicConsolidator, consolidate
from evoharness_rl.rollout.trajectory import Trajectory, Turn

ALF = AlfworldGrounding()
SHOP = WebShopGrounding()


@pytest.mark.parametrize("action, skeleton, key", [
    ("take mug 1 from cabinet 2", "take OBJ from RECEP", True),
    ("move mug 1 to shelf 1", "move OBJ to RECEP", True),
    ("cool potato 2 with fridge 1", "cool OBJ with fridge", True),
    ("heat egg 1 with microwave 1", "heat OBJ with microwave", True),
    ("clean plate 3 with sinkbasin 1", "clean OBJ with sinkbasin", True),
    ("use desklamp 1", "use desklamp", True),
    ("slice apple 1 with knife 2", "slice OBJ with knife", True),
    ("go to cabinet 12", "go to RECEP", False),
    ("open fridge 1", "open RECEP", False),
    ("look", "look", False),
    ("put mug 1 in cabinet 2", "put X in X", True),
])
def test_alfworld_skeletons(action, skeleton, key):
    assert ALF.skeleton(action) == skeleton and ALF.key_step(skeleton) is key


def test_alfworld_search_facts_read_engine_text_only():
    turns = [
        Turn(0, [], "", "env", "go to stoveburner 2", observation="You arrive at stoveburner 2. On the stoveburner 2, you see a kettle 1, and a pan 2."),
        Turn(1, [], "", "env", "open fridge 1", observation="You open the fridge 1. The fridge 1 is open. In it, you see a egg 3."),
        Turn(2, [], "", "env", "go to sinkbasin 1", observation="You arrive at sinkbasin 1. On the sinkbasin 1, you see nothing."),
        Turn(3, [], "", "harness", "where is the mug", verb="recall", observation="Where to find mug: fridge first"),
        Turn(4, [], "", "env", "take kettle 1 from stoveburner 2", observation="You pick up the kettle 1 from the stoveburner 2."),
        Turn(5, [], "", "env", "move kettle 1 to shelf 1", observation="You move the kettle 1 to the shelf 1."),
        Turn(6, [], "", "env", "go to shelf 1", observation="You arrive at shelf 1. On the shelf 1, you see a kettle 1."),
    ]  # the kettle on the shelf is where the agent put it: not a placement fact
    traj = Trajectory(task_id="t", family="f", env="alfworld", turns=turns,
                      notes=["soapbar usually in sinkbasin 1", "the pan was not on the fridge", "agent was at sinkbasin"])
    assert ALF.search_facts(traj) == [("egg", "fridge"), ("kettle", "stoveburner"), ("pan", "stoveburner"), ("soapbar", "sinkbasin")]


def test_alfworld_mistake_advice():
    assert ALF.mistake_advice("invalid:put X in X")[1] == "place objects with 'move X to Y'"
    assert "track" in ALF.mistake_advice("revisit")[1] and ALF.mistake_advice("repeat:go to RECEP") is None


@pytest.mark.parametrize("action, skeleton, key", [
    ("search[navy long sleeve shirt]", "search[QUERY]", True),
    ("click[b09qqp3356]", "click[ITEM]", True),
    ("click[Buy Now]", "click[buy now]", True),
    ("click[x-large]", "click[OPTION]", True),
    ("click[next >]", "click[next >]", False),
    ("click[back to search]", "click[back to search]", False),
    ("click[description]", "click[description]", False),
])
def test_webshop_skeletons(action, skeleton, key):
    assert SHOP.skeleton(action) == skeleton and SHOP.key_step(skeleton) is key


@pytest.mark.parametrize("query, phrasing", [
    ("navy shirt", "short query (1-3 words), no price"),
    ("navy long sleeve button-down shirt", "medium query (4-7 words), no price"),
    ("navy shirt under 40 dollars", "medium query (4-7 words), with the price"),
    ("shirt lower than 40.00", "medium query (4-7 words), with the price"),
    ("i need a navy long sleeve button-down shirt in size large please", "long query (8+ words), no price"),
])
def test_webshop_query_phrasing(query, phrasing):
    assert query_phrasing(query) == phrasing


def shop_episode(query, won, family="clothing", i=0):
    actions = [f"search[{query}]", "click[b0abcdefg1]", "click[large]", "click[buy now]"]
    turns = [Turn(k, [], "", "env", a, observation="...") for k, a in enumerate(actions)]
    return Trajectory(task_id=f"test/{i}", family=family, env="webshop", turns=turns, won=won)


def test_webshop_heuristic_learns_phrasings_and_the_purchase_procedure():
    trajs = [shop_episode("navy shirt", True, i=i) for i in range(3)] + [shop_episode("a b c d e f g h i", False, i=9)]
    bank = ExperienceBank()
    consolidate(bank, trajs, HeuristicConsolidator(SHOP))
    assert bank.find("search", "clothing", family="clothing").principle == (
        "Searching for clothing: a short query (1-3 words), no price worked best")
    assert bank.snapshot().recall("search phrasing", "toys", 3)[1] == []  # scoped to its own category
    assert bank.find("task:clothing", "procedure", "clothing").principle.endswith(
        "search[QUERY] > click[ITEM] > click[OPTION] > click[buy now]")
