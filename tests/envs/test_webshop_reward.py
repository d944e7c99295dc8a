"""WebShop reward: hand-computed cases of r_type * (attrs + options + price) / (n_attrs + n_opts + 1)."""

import pytest

from evoharness_rl.envs.webshop.reward import attribute_matches, option_matches, purchase_reward, type_reward

SHIRT_PATH = "Clothing, Shoes & Jewelry › Men › Clothing › Shirts"


def _shirt(**overrides):
    product = {
        "name": "Ridgeline Men's Slim Fit Button-Down Shirt",
        "product_type": "button-down shirt",
        "product_category": SHIRT_PATH,
        "attributes": ["slim fit", "long sleeve", "machine wash"],
        "small_description": ["Slim Fit - for a clean look", "Long Sleeve - all day", "Machine Wash - easy care"],
        "full_description": "A wardrobe staple.",
    }
    return {**product, **overrides}


def _goal(**overrides):
    goal = {
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


def test_wrong_size_is_an_exact_mismatch():
    # size is matched exactly: "x-large" != "large" although fuzzily they would match. (2 + 1 + 1) / 5 = 0.8
    result = purchase_reward(_shirt(), _goal(), {"color": "navy", "size": "x-large"}, price=31.99)
    assert result.options_matched == 1
    assert result.reward == pytest.approx(0.8)


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
    # no type word shared: title_score 0 -> r_type 0, whatever else matches
    assert (result.r_type, result.title_score, result.reward) == (0.0, 0.0, 0.0)


def test_type_reward_thresholds():
    goal = _goal(product_type="heavy duty steel shank hiking boots", product_category="Outdoor › Boots")
    # 1 of 6 type words (0.167 <= 0.2), other type and category: not a match -> 0.5
    boots = _shirt(name="Acme Hiking Sandals", product_type="sandals", product_category="Beach › Sandals")
    assert type_reward(boots, goal)[:2] == (0.5, pytest.approx(1 / 6))
    # the same overlap but a shared breadcrumb of >= 2 levels counts as a match -> 1.0
    boots_in_category = _shirt(name="Acme Hiking Sandals", product_type="sandals",
                               product_category="Outdoor › Boots › X")
    assert type_reward(boots_in_category, goal)[0] == 1.0
    # 1 of 12 type words (< 0.1) -> 0.1
    long_goal = _goal(product_type="b c d e f g h i j k l hiking", product_category="Outdoor › Boots")
    assert type_reward(boots, long_goal)[0] == 0.1


def test_polo_for_button_down_keeps_full_type_credit_like_webshop():
    # WebShop is lenient: "shirt" is 1 of 3 type words (0.33 > 0.2) and the breadcrumbs match -> r_type 1
    polo = _shirt(name="Hollis Men's Polo Shirt", product_type="polo shirt", attributes=["short sleeve"],
                  small_description=["Short Sleeve - cool"])
    result = purchase_reward(polo, _goal(), NAVY_LARGE, price=20.0)
    assert result.r_type == 1.0
    assert result.reward == pytest.approx(3 / 5)  # no goal attribute, both options, price


def test_fuzzy_attribute_and_option_matching():
    product = _shirt(attributes=["machine washable"], small_description=[], full_description="", name="Shirt")
    # token_set_ratio("machine washable", "machine wash") = 85.7 > 85
    assert attribute_matches(product, ["machine wash"]) == 1
    assert attribute_matches(product, ["hand wash"]) == 0
    # colour is fuzzy (case and word order do not matter); size stays exact
    assert option_matches({"color": "sky blue"}, {"color": "Blue Sky"}) == 1
    assert option_matches({"color": "navy"}, {"color": "black"}) == 0
    assert option_matches({"size": "large"}, {"size": "Large"}) == 0


def test_attribute_found_in_text_but_not_in_list():
    product = _shirt(attributes=[], small_description=["Wrinkle Free - travels well"])
    assert attribute_matches(product, ["wrinkle free", "long sleeve"]) == 1
