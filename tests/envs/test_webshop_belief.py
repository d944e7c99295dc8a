"""WebShop Belief: constraints, candidates across result pages, options, price after selection, views."""

import pytest

from evoharness_rl.config import EnvConfig
from evoharness_rl.envs.base import StepResult
from evoharness_rl.envs.webshop.adapter import make_webshop_env
from evoharness_rl.envs.webshop.catalogue import price_bounds
from evoharness_rl.envs.webshop.pages import parse_page, parse_request


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    cfg = EnvConfig(name="webshop", data_dir=str(tmp_path_factory.mktemp("ws")))
    cfg.webshop.num_products, cfg.webshop.num_goals, cfg.webshop.test_goals = 600, 40, 20
    return make_webshop_env(cfg)


def _goal_with_surcharge(env):
    """A goal whose target charges extra for the requested option value."""
    for index, goal in enumerate(env.goals):
        target = env.text_env.catalogue.by_asin[goal["asin"]]
        if price_bounds(target, goal["goal_options"])[0] > price_bounds(target, {})[0]:
            return index, goal, target
    raise AssertionError("no goal whose requested option costs extra")


def _act(env, belief, action):
    result = env.step(action)
    belief.update(action, result)
    return result


def _open(env, belief, target):
    _act(env, belief, f"search[{target['name']}]")
    while f"click[{target['asin'].lower()}]" not in env.last_result.admissible_actions:
        _act(env, belief, "click[next >]")
    _act(env, belief, f"click[{target['asin'].lower()}]")


def test_request_constraints_come_from_the_instruction(env):
    request = parse_request(
        "find me some steel shank hiking boots in charcoal color and in size 6, priced under $160.00")
    assert (request.product_type, request.attributes, request.price_upper) == ("hiking boots", ["steel shank"], 160.0)
    assert request.options == {"color": "charcoal", "size": "6"}
    assert request.search_query() == "steel shank hiking boots charcoal"


def test_candidates_accumulate_across_result_pages(env):
    task, first = env.reset("goal_00000")
    belief = env.make_belief()
    belief.reset(task, first)
    _act(env, belief, "search[black white grey]")
    page_one = dict(belief.candidates)
    _act(env, belief, "click[next >]")
    assert len(page_one) == 10 and len(belief.candidates) == 20 and set(page_one) <= set(belief.candidates)
    first_seen = next(iter(page_one.values()))
    assert first_seen.price and first_seen.order == 0
    view = belief.track("candidates")
    assert view.startswith("CANDIDATES (20 seen, best first):") and "... 12 more" in view
    assert belief.queries == ["black white grey"]


def test_options_and_price_after_selection(env):
    index, goal, target = _goal_with_surcharge(env)
    task, first = env.reset(f"goal_{index:05d}")
    belief = env.make_belief()
    belief.reset(task, first)
    _open(env, belief, target)
    assert belief.current == target["asin"] and belief.selected == {}
    assert "no options selected" in belief.track("price")
    progress = dict(belief.auto_progress())
    assert progress[f"product type: {goal['product_type']}"] and not progress[f"price <= ${goal['price_upper']:.2f}"]

    for group, value in goal["goal_options"].items():
        _act(env, belief, f"click[{value}]")
    assert belief.selected == goal["goal_options"]
    low, high = price_bounds(target, goal["goal_options"])
    assert belief.current_price == (low, high) and low > price_bounds(target, {})[0]
    assert f"costs ${low:.2f}" in belief.track("price") and "within budget" in belief.track("price")
    options = belief.track("options")
    for group, value in goal["goal_options"].items():
        assert f"- {group}: selected {value};" in options and f"required {value}" in options

    _act(env, belief, "click[features]")
    _act(env, belief, "click[< prev]")
    assert belief.selected == goal["goal_options"]  # the selection survives a visit to Features
    progress = dict(belief.auto_progress())
    assert all(progress[f"attribute: {a}"] for a in goal["attributes"])
    assert all(progress[f"option {g}: {v}"] for g, v in goal["goal_options"].items())
    assert progress[f"price <= ${goal['price_upper']:.2f}"] and not progress["buy the verified item"]

    _act(env, belief, "click[< prev]")  # back to the results clears the current item
    assert belief.current is None and belief.selected == {} and belief.candidates[target["asin"]].opened


def test_invalid_results_do_not_change_the_belief(env):
    task, first = env.reset("goal_00001")
    belief = env.make_belief()
    belief.reset(task, first)
    _act(env, belief, "search[lipstick]")
    before = (dict(belief.candidates), belief.page.kind, list(belief.queries))
    _act(env, belief, "click[not a button]")
    assert (dict(belief.candidates), belief.page.kind, list(belief.queries)) == before


def test_track_is_read_only_and_render_is_the_table(env):
    index, goal, target = _goal_with_surcharge(env)
    task, first = env.reset(f"goal_{index:05d}")
    belief = env.make_belief()
    belief.reset(task, first)
    _open(env, belief, target)
    state = (dict(belief.candidates), dict(belief.selected), belief.current)
    for query in ("price", "candidates", "options", "", target["name"].split()[-1], "zebra stripes"):
        belief.track(query)
    assert (dict(belief.candidates), dict(belief.selected), belief.current) == state
    rendered = belief.render()
    assert rendered.startswith("REQUEST: " + goal["product_type"]) and "CANDIDATES (" in rendered
    assert f"{target['asin']} |" in rendered and "[current]" in rendered and "PRICE:" in rendered
    assert belief.track("") == rendered
    assert "No seen product mentions 'zebra stripes'" in belief.track("zebra stripes")
    assert target["asin"] in belief.track(target["name"].split()[-1])


def test_verdicts_flag_visible_problems(env):
    task, first = env.reset("goal_00002")
    belief = env.make_belief()
    belief.reset(task, first)
    belief.request = parse_request("i need a polo shirt that is pique knit in navy, and price lower than 10.00 dollars")
    observation = ("Back to Search [SEP] Page 1 (Total results: 2) [SEP] B000000001 [SEP] Acme Men's Polo Shirt "
                   "[SEP] $19.99 [SEP] B000000002 [SEP] Acme Men's Pique Knit Polo Shirt [SEP] $8.99")
    actions = ["click[back to search]", "click[b000000001]", "click[b000000002]"]
    belief.update("search[polo shirt]", StepResult(observation, actions))
    assert belief.verdict(belief.candidates["B000000001"]) == "reject: over budget"
    assert belief.verdict(belief.candidates["B000000002"]) == "fits so far"
    assert belief.track("candidates").splitlines()[1].startswith("- B000000002 | $8.99")


def test_parse_page_kinds():
    assert parse_page("Search", ["search[<your query>]"]).kind == "search"
    done = parse_page("Thank you for shopping with us! [SEP] Your score (min 0.0, max 1.0) [SEP] 0.5", [])
    assert (done.kind, done.score) == ("done", 0.5)
    sub = parse_page("Back to Search [SEP] < Prev [SEP] Soft [SEP] Warm", ["click[back to search]", "click[< prev]"])
    assert (sub.kind, sub.body) == ("sub", ["Soft", "Warm"])
