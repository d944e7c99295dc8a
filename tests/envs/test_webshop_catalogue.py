"""WebShop catalogue and goals: determinism, schema, distractors, caching, splits."""

import json
import re
import time

import pytest

from evoharness_rl.config import EnvConfig
from evoharness_rl.envs.webshop import catalogue as cat
from evoharness_rl.envs.webshop.pages import parse_request
from evoharness_rl.envs.webshop.reward import purchase_reward
from evoharness_rl.envs.webshop.vocab import CATEGORIES, PRODUCT_TYPES, attribute_pool, vocabulary_conflicts


def _cfg(tmp_path, products=400, goals=60, test_goals=20, seed=0):
    cfg = EnvConfig(name="webshop", data_dir=str(tmp_path))
    cfg.webshop.num_products, cfg.webshop.num_goals = products, goals
    cfg.webshop.test_goals, cfg.webshop.generator_seed = test_goals, seed
    return cfg


@pytest.fixture(scope="module")
def products():
    return cat.make_products(1200, seed=0)


@pytest.fixture(scope="module")
def goals(products):
    return cat.make_goals(products, 150, seed=0)


def test_generation_is_deterministic_and_prefix_stable(products):
    assert cat.make_products(1200, seed=0) == products
    assert cat.make_products(300, seed=0) == products[:300]
    assert cat.make_products(300, seed=1) != products[:300]
    assert len({p["asin"] for p in products}) == len(products)
    assert all(re.fullmatch(r"B0[A-Z0-9]{8}", p["asin"]) for p in products)


def test_vocabulary_has_no_fuzzy_collisions():
    assert vocabulary_conflicts() == []
    assert len(CATEGORIES) == 5 and len(PRODUCT_TYPES) >= 40


def test_products_follow_the_schema_and_spread_over_categories(products):
    keys = {"asin", "name", "category", "product_type", "product_category", "brand", "pricing", "base_price",
            "attributes", "customization_options", "small_description", "full_description", "reviews", "average_rating"}
    assert all(keys <= set(p) for p in products)
    counts = {c.name: sum(p["category"] == c.name for p in products) for c in CATEGORIES}
    assert min(counts.values()) > 0.1 * len(products), counts
    prices = sorted(p["base_price"] for p in products)
    assert prices[0] < 15 and prices[-1] > 150  # a real price spread
    ranged = [p for p in products if " to " in p["pricing"]]
    assert 0.1 * len(products) < len(ranged) < 0.9 * len(products)


def test_attributes_are_visible_exactly(products):
    """Every attribute is written in the product text, and no other pool attribute is."""
    for p in products:
        text = " ".join([p["name"], *p["small_description"], p["full_description"]]).lower()
        pool = attribute_pool(PRODUCT_TYPES[p["product_type"]])
        assert sorted(a for a in pool if a in text) == p["attributes"], p["asin"]


def test_goals_are_satisfiable_specific_and_have_distractors(goals, products):
    by_asin = {p["asin"]: p for p in products}
    for goal in goals:
        target = by_asin[goal["asin"]]
        assert 1 <= len(goal["attributes"]) <= 3
        assert set(goal["goal_options"]) == set(target["customization_options"])
        assert cat.constraint_misses(target, goal) == 0
        price = cat.variant_price(target, goal["goal_options"])
        assert purchase_reward(target, goal, goal["goal_options"], price).reward == 1.0
        assert goal["price_upper"] % 10 == 0 and price < goal["price_upper"] <= price + 20
    assert sum(g["near_misses"] > 0 for g in goals) >= 0.95 * len(goals)
    assert sum(g["satisfying"] <= cat.MAX_SATISFYING for g in goals) >= 0.9 * len(goals)


def test_near_miss_counts_agree_with_the_reward(goals, products):
    """A product one constraint short scores below 1 with the best options it offers."""
    for goal in goals[:40]:
        for p in products:
            misses = cat.constraint_misses(p, goal)
            if misses is None:
                continue
            offered = {g: v for g, v in goal["goal_options"].items()
                       if v in {o["value"] for o in p["customization_options"].get(g, [])}}
            reward = purchase_reward(p, goal, offered, cat.variant_price(p, offered)).reward
            assert (reward == 1.0) == (misses == 0), (goal["instruction_text"], p["asin"])


def test_instructions_are_varied_and_parse_back(goals):
    openers = {" ".join(g["instruction_text"].split()[:2]) for g in goals}
    assert len(openers) >= 8
    assert any("price lower than" in g["instruction_text"] for g in goals)
    assert any("price lower than" not in g["instruction_text"] for g in goals)
    for goal in goals:
        request = parse_request(goal["instruction_text"])
        assert request.product_type == goal["product_type"], goal["instruction_text"]
        assert sorted(request.attributes) == sorted(goal["attributes"]), goal["instruction_text"]
        assert request.options == goal["goal_options"], goal["instruction_text"]
        assert request.price_upper == goal["price_upper"], goal["instruction_text"]


def test_variant_prices():
    product = {"base_price": 20.0, "customization_options": {
        "color": [{"value": "red", "price": 0.0}, {"value": "blue", "price": 0.0}],
        "size": [{"value": "small", "price": 0.0}, {"value": "large", "price": 4.5}]}}
    assert cat.price_bounds(product, {}) == (20.0, 24.5)
    assert cat.price_bounds(product, {"size": "large"}) == (24.5, 24.5)
    assert cat.variant_price(product, {"color": "blue"}) == 20.0
    assert cat.price_text(20.0, 24.5) == "$20.00 to $24.50"


def test_prepare_writes_once_and_is_cached(tmp_path):
    cfg = _cfg(tmp_path)
    folder = cat.prepare(cfg)
    assert {p.name for p in folder.iterdir()} == {"products.json", "goals.json", "meta.json"}
    products = json.loads((folder / "products.json").read_text())
    goals = json.loads((folder / "goals.json").read_text())
    assert (len(products), len(goals)) == (400, 60)
    stamp = (folder / "products.json").stat().st_mtime_ns
    start = time.perf_counter()
    assert cat.prepare(cfg) == folder
    assert time.perf_counter() - start < 0.05
    assert (folder / "products.json").stat().st_mtime_ns == stamp
    assert cat.load_catalogue(folder) is cat.load_catalogue(folder)
    assert cat.prepare(_cfg(tmp_path, seed=1)) != folder  # other parameters, other folder


def test_prepare_rejects_bad_settings(tmp_path):
    with pytest.raises(ValueError, match="test_goals"):
        cat.prepare(_cfg(tmp_path, goals=10, test_goals=20))
    cfg = _cfg(tmp_path)
    cfg.data_path = str(tmp_path / "nowhere")
    with pytest.raises(FileNotFoundError, match="meta.json"):
        cat.prepare(cfg)


def test_splits_and_aliases():
    assert cat.split_indices("test", 60, 20) == range(0, 20)
    assert cat.split_indices("valid_seen", 60, 20) == cat.split_indices("valid_unseen", 60, 20) == range(0, 20)
    assert cat.split_indices("train", 60, 20) == range(20, 60)
    with pytest.raises(ValueError, match="unknown WebShop split 'dev'"):
        cat.split_indices("dev", 60, 20)
