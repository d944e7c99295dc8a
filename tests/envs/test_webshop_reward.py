"""WebShop reward: hand-computed cases of r_type * (attrs + options + price) / (n_attrs + n_opts + 1),
pinned to the rules of WebShop's released `get_reward` (web_agent_site/engine/goal.py)."""

import pytest

from evoharness_rl.envs.webshop.reward import (
    attribute_matches,
    fuzzy_match,
    option_matches,
    purchase_reward,
    title_words,
    type_reward,
)

SHIRT_PATH = "Clothing, Shoes & Jewelry › Men › Clothing › Shirts"
SHIRT_TITLE = "Ridgeline Men's Slim Fit Button-Down Shirt"  # words: ridgeline men slim fit button down shirt


def _shirt(**overrides):
    product = {
        "name": SHIRT_TITLE,
        "product_type": "button-down shirt",
        "product_category": SHIRT_PATH,
        "attributes": ["slim fit", "long sleeve", "machine wash"],
        "small_description": ["Slim Fit - for a clean look", "Long Sleeve - all day", "Machine Wash - easy care"],
        "full_description": "A wardrobe staple.",
    }
    return {**product, **overrides}


def _goal(**overrides):
    goal = {
        "name": SHIRT_TITLE,
        "product_type": "button-down shirt",
        "product_category": SHIRT_PATH,
        "attributes": ["long sleeve", "slim fit"],
        "goal_options": {"color": "navy", "size": "large"},
        "price_upper": 40.0,
    }
    return {**goal, **overrides}


NAVY_LARGE = {"color": "navy", "size": "large"}


def test_everything_matches_gives_one():
    # (2 attributes + 2 options + 1 price) / (2 + 2 + 1) = 1.0
    result = purchase_reward(_shirt(), _goal(), NAVY_LARGE, price=31.99)
    assert result.reward == 1.0
    assert (result.attributes_matched, result.options_matched, result.price_ok) == (2, 2, True)


def test_partial_attribute_match():
    # "wrinkle free" is neither an attribute nor in the text: (1 + 2 + 1) / 5 = 0.8
    result = purchase_reward(_shirt(), _goal(attributes=["long sleeve", "wrinkle free"]), NAVY_LARGE, price=31.99)
    assert result.attributes_matched == 1
    assert result.reward == pytest.approx(0.8)


def test_near_size_counts_as_in_webshop_unless_sizes_are_exact():
    # token_set_ratio("x-large", "large") = 100 > 85: full credit, as in WebShop. (2 + 2 + 1) / 5 = 1.0
    near = {"color": "navy", "size": "x-large"}
    result = purchase_reward(_shirt(), _goal(), near, price=31.99)
    assert (result.options_matched, result.reward) == (2, 1.0)
    # the stricter variant: "x-large" != "large". (2 + 1 + 1) / 5 = 0.8
    strict = purchase_reward(_shirt(), _goal(), near, price=31.99, exact_size=True)
    assert strict.options_matched == 1
    assert strict.reward == pytest.approx(0.8)
    # a clearly different size gets no credit either way: token_set_ratio("small", "large") = 20
    result = purchase_reward(_shirt(), _goal(), {"color": "navy", "size": "small"}, price=31.99)
    assert result.options_matched == 1
    assert result.reward == pytest.approx(0.8)


@pytest.mark.parametrize("wanted,bought,matched", [
    ("1.7 fl oz", "1 fl oz", True),  # the tokens of one are a subset of the other's: 100
    ("1 fl oz", "8 fl oz", True),  # "fl oz 1" vs "fl oz 8": 85.7
    ("12 fl oz", "32 fl oz", True),  # 87.5
    ("large", "x-large", True),  # 100
    ("x-large", "xx-large", True),  # 93.3
    ("small", "x-small", True),
    ("large", "Large", True),  # preprocessing lowercases
    ("1.7 fl oz", "3.4 fl oz", False),  # 77.8
    ("large", "small", False),  # 20
    ("large", "medium", False),
    ("10", "11", False),  # 50
    ("6", "7", False),  # 0
])
def test_sizes_match_fuzzily_as_in_webshop(wanted, bought, matched):
    assert option_matches({"size": wanted}, {"size": bought}) == int(matched)
    assert option_matches({"size": wanted}, {"size": bought}, exact_size=True) == int(wanted == bought)


def test_missing_options_count_zero():
    # nothing selected: (2 + 0 + 1) / 5 = 0.6
    assert purchase_reward(_shirt(), _goal(), {}, price=31.99).reward == pytest.approx(0.6)


def test_over_budget():
    # 45.00 > 40.00: (2 + 2 + 0) / 5 = 0.8; exactly at the ceiling is within budget
    assert purchase_reward(_shirt(), _goal(), NAVY_LARGE, price=45.0).reward == pytest.approx(0.8)
    assert purchase_reward(_shirt(), _goal(), NAVY_LARGE, price=40.0).reward == 1.0


def test_wrong_product_type_gives_zero():
    shampoo = _shirt(name="Nordvik Argan Oil Shampoo", product_type="shampoo",
                     product_category="Beauty & Personal Care › Hair Care › Shampoos")
    result = purchase_reward(shampoo, _goal(), NAVY_LARGE, price=9.99)
    # no title word shared: title_score 0 -> r_type 0, whatever else matches
    assert (result.r_type, result.title_score, result.reward) == (0.0, 0.0, 0.0)


def test_title_words_stand_in_for_spacy_nouns():
    assert title_words("Ridgeline Men's Slim-Fit 4K Button-Down Shirt, 3-Pack") == [
        "ridgeline", "men", "slim", "fit", "button", "down", "shirt", "pack"]
    assert title_words("Shirt shirt") == ["shirt", "shirt"]  # repeats kept: WebShop's denominator counts them
    assert title_words("4K 1080p 2.1") == []


def test_type_reward_compares_titles_not_type_names():
    # WebShop ignores the type's name: only the goal title's words found in the bought title count
    boots_goal = _goal(name="Acme Heavy Duty Steel Shank Hiking Boots", product_type="hiking boots",
                       product_category="Outdoor › Boots")
    sandals = _shirt(name="Zephyr Hiking Sandals", product_type="hiking boots", product_category="Beach › Sandals")
    # same type (query match), 1 of 7 title words (0.14): still a match -> 1.0
    assert type_reward(sandals, boots_goal) == (1.0, pytest.approx(1 / 7), True, False)
    # the same titles under another type and breadcrumb: no match -> 0.5
    other = {**sandals, "product_type": "sandals"}
    assert type_reward(other, boots_goal)[:2] == (0.5, pytest.approx(1 / 7))
    # the same overlap but a shared breadcrumb of >= 2 levels counts as a match -> 1.0
    assert type_reward({**other, "product_category": "Outdoor › Boots › Sale"}, boots_goal)[0] == 1.0
    # 1 of 11 title words (< 0.1) -> 0.1, although the type matches
    long_goal = {**boots_goal, "name": "Acme Heavy Duty Steel Shank Waterproof Leather Lace Up Hiking Boots"}
    assert type_reward(sandals, long_goal)[:2] == (0.1, pytest.approx(1 / 11))
    # the right type but no title word in common -> 0, however much else matches
    assert type_reward(_shirt(name="Zephyr Trail Sandals", product_type="hiking boots"), boots_goal)[0] == 0.0
    # repeats count in the denominator: "shirt" shared, 1 of 4 words (not 1 of 3)
    repeat = _goal(name="Shirt Shirt Company Oxford", product_category="Other › Path")
    assert type_reward(_shirt(name="Polo Shirt", product_category="Misc › Path"), repeat)[1] == 0.25
    # a goal title without alphabetic words: title_score 0.2, so r_type rests on type and category
    assert type_reward(_shirt(product_type="x", product_category="a › b"), _goal(name="4K 1080p"))[:2] == (0.5, 0.2)


def test_wrong_product_in_the_right_category_keeps_full_type_credit_like_webshop():
    # WebShop is lenient: a polo shares "men" and "shirt" with the goal title (2/7 = 0.29 > 0.2) -> r_type 1
    polo = _shirt(name="Hollis Men's Polo Shirt", product_type="polo shirt", attributes=["short sleeve"],
                  small_description=["Short Sleeve - cool"])
    result = purchase_reward(polo, _goal(), NAVY_LARGE, price=20.0)
    assert (result.r_type, result.title_score) == (1.0, pytest.approx(2 / 7))
    assert result.reward == pytest.approx(3 / 5)  # no goal attribute, both options, price
    # socks share only "men" (1/7 = 0.14), but two breadcrumb levels: still r_type 1
    socks = _shirt(name="Hollis Men's Crew Socks", product_type="crew socks", attributes=[], small_description=[],
                   product_category="Clothing, Shoes & Jewelry › Unisex › Clothing › Socks")
    result = purchase_reward(socks, _goal(), NAVY_LARGE, price=9.0)
    assert (result.r_type, result.category_match, result.query_match) == (1.0, True, False)
    assert result.reward == pytest.approx(3 / 5)


def test_fuzzy_attribute_and_option_matching():
    product = _shirt(attributes=["machine washable"], small_description=[], full_description="", name="Shirt")
    # token_set_ratio("machine washable", "machine wash") = 85.7 > 85
    assert attribute_matches(product, ["machine wash"]) == 1
    assert attribute_matches(product, ["hand wash"]) == 0
    # case and word order do not matter
    assert option_matches({"color": "sky blue"}, {"color": "Blue Sky"}) == 1
    assert option_matches({"color": "navy"}, {"color": "black"}) == 0
    assert option_matches({"size": "large"}, {"size": "Large"}) == 1
    assert option_matches({"size": "large"}, {"size": "Large"}, exact_size=True) == 0
    assert option_matches({"color": "sky blue"}, {"color": "Blue Sky"}, exact_size=True) == 1  # colour stays fuzzy


def test_options_match_by_value_and_each_goal_option_counts_once():
    # WebShop compares values whatever their group, and stops at the first selected value that matches
    assert option_matches({"size": "large"}, {"fit": "Large"}) == 1
    assert option_matches({"color": "navy", "size": "large"}, {"color": "navy", "size": "large", "x": "navy"}) == 2
    assert option_matches({"color": "navy", "size": "large"}, {}) == 0


def test_fuzzy_threshold_uses_the_rounded_score_like_thefuzz():
    # token_set_ratio = 2 * 23 / 54 = 85.19: thefuzz rounds it to 85, which is not > 85
    assert not fuzzy_match("abcdefghijklmnopqrstuvwxxxx", "abcdefghijklmnopqrstuvwyyyy")
    assert fuzzy_match("machine washable", "machine wash")  # 85.7 -> 86


def test_attribute_found_in_text_but_not_in_list():
    product = _shirt(attributes=[], small_description=["Wrinkle Free - travels well"])
    assert attribute_matches(product, ["wrinkle free", "long sleeve"]) == 1
