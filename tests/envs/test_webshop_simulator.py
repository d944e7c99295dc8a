"""WebShop simulator: page flow, text observations, clickables, search, purchase."""

import pytest

from evoharness_rl.config import EnvConfig
from evoharness_rl.envs.webshop.catalogue import load_catalogue, prepare, price_bounds, price_text, variant_price
from evoharness_rl.envs.webshop.reward import purchase_reward
from evoharness_rl.envs.webshop.simulator import WebShopTextSim, parse_action, search_index

SEP = " [SEP] "


@pytest.fixture(scope="module")
def catalogue(tmp_path_factory):
    cfg = EnvConfig(name="webshop", data_dir=str(tmp_path_factory.mktemp("ws")))
    cfg.webshop.num_products, cfg.webshop.num_goals, cfg.webshop.test_goals = 600, 40, 20
    return load_catalogue(prepare(cfg))


@pytest.fixture
def sim(catalogue):
    return WebShopTextSim(catalogue)


def _surcharged(catalogue):
    """A product whose first priced option group has a surcharge, and that group."""
    for p in catalogue.products:
        for group, options in p["customization_options"].items():
            if options[-1]["price"] > 0:
                return p, group
    raise AssertionError("the catalogue has no product with option surcharges")


def test_search_page(sim, catalogue):
    obs, info = sim.reset(session=3)
    instruction = catalogue.goals[3]["instruction_text"]
    assert (obs, info) == (f"WebShop [SEP] Instruction: [SEP] {instruction} [SEP] Search", None)
    assert sim.get_available_actions() == {"has_search_bar": True, "clickables": ["search"]}


def test_results_pages_and_paging(sim):
    sim.reset(session=0)
    obs, reward, done, _ = sim.step("search[black white grey]")  # option values are indexed: > 50 hits
    assert (reward, done) == (0.0, False)
    segments = obs.split(SEP)
    assert segments[:5] == ["Instruction:", sim.instruction_text, "Back to Search", "Page 1 (Total results: 50)",
                            "Next >"]
    clickables = sim.get_available_actions()["clickables"]
    assert clickables[:2] == ["back to search", "next >"] and len(clickables) == 12
    asin = segments[5]
    assert asin.lower() == clickables[2] and segments[7].startswith("$")
    obs, *_ = sim.step("click[Next >]")  # arguments are lowercased, as in WebShop
    assert "Page 2 (Total results: 50) [SEP] < Prev [SEP] Next >" in obs
    for _ in range(3):
        sim.step("click[next >]")
    assert "Page 5" in sim.observation and "Next >" not in sim.observation
    assert sim.get_available_actions()["clickables"][:2] == ["back to search", "< prev"]
    sim.step("click[< prev]")
    assert "Page 4 (Total results: 50)" in sim.observation


def test_item_page_options_subpages_and_navigation(sim, catalogue):
    product, group = _surcharged(catalogue)
    sim.reset(session=0)
    sim.step(f"search[{product['name']}]")
    assert product["asin"] in sim.results
    while product["asin"].lower() not in sim.get_available_actions()["clickables"]:
        sim.step("click[next >]")
    obs, *_ = sim.step(f"click[{product['asin'].lower()}]")
    segments = obs.split(SEP)
    assert segments[2:4] == ["Back to Search", "< Prev"]
    assert segments[-4:] == ["Description", "Features", "Reviews", "Buy Now"]
    assert product["name"] in segments and f"Price: {product['pricing']}" in segments
    values = [o["value"] for o in product["customization_options"][group]]
    assert segments[segments.index(group) + 1: segments.index(group) + 1 + len(values)] == values
    clickables = sim.get_available_actions()["clickables"]
    assert clickables[:6] == ["back to search", "< prev", "description", "features", "reviews", "buy now"]
    assert set(values) <= set(clickables)

    sim.step(f"click[{values[-1]}]")  # the most expensive value: the shown price follows the selection
    shown = price_text(*price_bounds(product, {group: values[-1]}))
    assert f"Price: {shown}" in sim.observation and shown != product["pricing"]
    obs, *_ = sim.step("click[features]")
    assert obs.split(SEP)[2:] == ["Back to Search", "< Prev", *product["small_description"]]
    assert sim.get_available_actions()["clickables"] == ["back to search", "< prev"]
    sim.step("click[< prev]")  # sub page -> item page, selection kept
    assert f"Price: {shown}" in sim.observation
    sim.step("click[< prev]")  # item page -> results, selection cleared
    assert "Total results" in sim.observation and sim.options == {}
    sim.step("click[back to search]")
    assert sim.observation.endswith("Search") and sim.get_available_actions()["has_search_bar"]


def test_buy_now_scores_with_the_webshop_reward(sim, catalogue):
    goal = catalogue.goals[5]
    target = catalogue.by_asin[goal["asin"]]
    sim.reset(session=5)
    sim.step(f"search[{target['name']}]")
    while target["asin"].lower() not in sim.get_available_actions()["clickables"]:
        sim.step("click[next >]")
    sim.step(f"click[{target['asin']}]")
    for value in goal["goal_options"].values():
        sim.step(f"click[{value}]")
    obs, reward, done, _ = sim.step("click[buy now]")
    assert (reward, done) == (1.0, True)
    assert obs == "Thank you for shopping with us! [SEP] Your score (min 0.0, max 1.0) [SEP] 1"
    expected = purchase_reward(target, goal, goal["goal_options"], variant_price(target, goal["goal_options"]))
    assert sim.reward_info["reward"] == expected.reward and sim.reward_info["asin"] == target["asin"]
    assert sim.get_available_actions() == {"has_search_bar": False, "clickables": []}


def test_unavailable_actions_do_nothing(sim):
    sim.reset(session=0)
    before = sim.observation
    for action in ("click[buy now]", "click[search]", "search[]", "jump", "click[next >]"):
        assert sim.step(action) == (before, 0.0, False, None)
    sim.step("search[shirt]")
    results = sim.observation
    assert sim.step("search[socks]")[0] == results  # no search bar on the results page


def test_search_ranks_the_named_product_first_and_is_shared(catalogue):
    index = search_index(catalogue)
    assert search_index(catalogue) is index
    for product in catalogue.products[:30]:
        hits = index.search(product["name"] + " " + " ".join(product["attributes"]))
        assert product["asin"] in hits[:10], product["name"]
        assert len(hits) <= 50
    assert index.search("the and of") == [] and index.search("zzzz qqqq") == []
    assert index.search("running shoes") == index.search("Running  SHOES!")


def test_parse_action():
    assert parse_action("search[ red shoes ]") == ("search", "red shoes")
    assert parse_action("Click[Buy Now]") == ("click", "Buy Now")
    assert parse_action("buy now") == (None, None) and parse_action("") == (None, None)
