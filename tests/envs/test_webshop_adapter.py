"""WebShop adapter: the environment contract over the simulator, bad input, and the real-checkout backend.

The real backend cannot run here (it needs a WebShop checkout with Java and spaCy), so
its wiring is tested with absent / stub checkouts, and its observation and action
handling with hand-written pages in the format WebShop's text env produces.
"""

import random
import sys
import textwrap
from types import SimpleNamespace

import pytest

from evoharness_rl.config import EnvConfig
from evoharness_rl.envs.webshop.adapter import (
    RealWebShopEnv,
    WebShopEnv,
    clean_observation,
    load_real_text_env,
    make_webshop_env,
)
from evoharness_rl.envs.webshop.prompts import WEBSHOP_SPEC
from evoharness_rl.envs.webshop.simulator import parse_action
from evoharness_rl.rollout.episode import Episode, EpisodeSettings


def _cfg(root, **webshop):
    cfg = EnvConfig(name="webshop", data_dir=str(root))
    cfg.webshop.num_products, cfg.webshop.num_goals, cfg.webshop.test_goals = 600, 40, 20
    for key, value in webshop.items():
        setattr(cfg.webshop, key, value)
    return cfg


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    env = make_webshop_env(_cfg(tmp_path_factory.mktemp("ws")))
    yield env
    env.close()


# ------------------------------------------------------------------------------- simulator


def test_task_ids_splits_and_reset(env):
    assert env.task_ids("test") == [f"goal_{i:05d}" for i in range(20)]
    assert env.task_ids("valid_seen") == env.task_ids("valid_unseen") == env.task_ids("test")
    assert env.task_ids("train")[0] == "goal_00020" and len(env.task_ids("train")) == 20
    task, first = env.reset("goal_00007")
    goal = env.goals[7]
    assert (task.task_id, task.family, task.split) == ("goal_00007", goal["category"], "test")
    assert task.objective == goal["instruction_text"]
    assert (first.observation, first.admissible_actions) == ("Search", ["search[<your query>]"])
    assert env.reset("goal_00030")[0].split == "train"
    with pytest.raises(KeyError, match="goal_<n>"):
        env.reset("goal_99999")


def test_reset_is_deterministic(env):
    runs = []
    for _ in range(2):
        env.reset("goal_00003", seed=1)
        result = env.step("search[wireless earbuds]")
        runs.append((result.observation, result.admissible_actions))
    assert runs[0] == runs[1]


def test_observations_drop_the_instruction_header(env):
    task, _ = env.reset("goal_00002")
    result = env.step("search[shirt]")
    assert result.observation.startswith("Back to Search [SEP] Page 1 (Total results: ")
    assert task.objective not in result.observation
    assert result.admissible_actions[0] == "click[back to search]"
    assert all(a.startswith("click[") and "\n" not in a for a in result.admissible_actions)


@pytest.mark.parametrize("action, reason", [
    ("click[add to cart]", "'add to cart' is not a button on this page"),
    ("click[]", "'' is not a button on this page"),
    ("click[search]", "'search' is not a button"),
    ("search[]", "search[] needs a query"),
    ("search[   ]", "search[] needs a query"),
    ("search[" + "x" * 10_000 + "]", "10000 characters long"),
    ("buy the shirt", "is not a WebShop action"),
    ("", "is not a WebShop action"),
    (None, "is not a WebShop action"),
])
def test_bad_input_on_the_search_page_is_invalid_and_harmless(env, action, reason):
    env.reset("goal_00001")
    result = env.step(action)
    assert result.invalid and not result.done and reason in result.info["reason"]
    assert "Available actions: search[<your query>]" in result.observation
    assert result.observation.endswith("\nSearch") and result.admissible_actions == ["search[<your query>]"]
    assert not env.step("search[lipstick]").invalid  # the episode continues


def test_search_without_a_search_bar_is_invalid(env):
    env.reset("goal_00001")
    page = env.step("search[lipstick]")
    result = env.step("search[shampoo]")
    assert result.invalid and "click[back to search] first" in result.observation
    assert result.observation.endswith(page.observation)  # unchanged page after the feedback
    assert "click[next >]" in result.observation  # the feedback names the available actions
    assert env.step("click[back to search]").admissible_actions == ["search[<your query>]"]


def test_buy_now_ends_the_episode_with_the_reward(env):
    env.reset("goal_00004")
    goal = env.goals[4]
    env.step(f"search[{env.text_env.catalogue.by_asin[goal['asin']]['name']}]")
    while f"click[{goal['asin'].lower()}]" not in env.last_result.admissible_actions:
        env.step("click[next >]")
    env.step(f"click[{goal['asin']}]")  # ASINs are accepted in upper case, as in WebShop
    for value in goal["goal_options"].values():
        assert not env.step(f"click[{value}]").invalid
    result = env.step("click[buy now]")
    assert (result.done, result.won, result.score) == (True, True, 1.0)
    assert result.info["reward"] == 1.0 and result.info["asin"] == goal["asin"]
    after = env.step("click[back to search]")
    assert after.invalid and after.done and after.won and "episode is over" in after.observation


def test_partial_purchase_is_not_a_win(env):
    env.reset("goal_00004")
    env.step("search[lipstick]")
    first = env.last_result.admissible_actions[2]  # click[<asin>] of the first result
    env.step(first)
    result = env.step("click[buy now]")
    assert result.done and not result.won and 0.0 <= result.score < 1.0


def test_close_is_idempotent(tmp_path):
    env = make_webshop_env(_cfg(tmp_path))
    env.close()
    env.close()


def test_spec_and_prompts():
    spec = WEBSHOP_SPEC
    assert spec.name == "webshop" and spec.actions_label == "AVAILABLE ACTIONS" and spec.action_format == "tags"
    assert set(spec.system_prompts) == {"env_only", "always_on", "adaptive"}
    assert "track [candidates]" in spec.system_prompts["adaptive"]
    assert "Harness Actions" not in spec.system_prompts["env_only"] + spec.system_prompts["always_on"]
    assert "BELIEF" in spec.system_prompts["always_on"]
    text = spec.turn_template.format(objective="O", observation="B", actions="A", history="H", harness_views="V")
    assert text == "OBJECTIVE: O\nOBSERVATION: B\nAVAILABLE ACTIONS: A\nPREVIOUS ACTION(S):\nH\nV"


def test_unknown_backend_is_rejected(tmp_path):
    with pytest.raises(ValueError, match="expected sim or real"):
        make_webshop_env(_cfg(tmp_path, backend="remote"))


# ---------------------------------------------------------------------------- real backend

INSTRUCTION = "i need a long clip-in hair extension which is natural looking, and price lower than 40.00 dollars"
# Pages as WebAgentTextEnv(observation_mode="text") renders them: visible text nodes joined with
# " [SEP] ", including the empty pieces its templates' whitespace produces.
PAGES = {
    "search": (f"WebShop [SEP] Instruction:  [SEP] {INSTRUCTION} [SEP] Search",
               {"has_search_bar": True, "clickables": ["search"]}),
    "results": (f"Instruction: [SEP] {INSTRUCTION} [SEP]  [SEP] Back to Search [SEP] Page 1 (Total results: 50) [SEP] "
                "Next > [SEP]  [SEP] B09C337K8S [SEP] Hair Extensions Clip In Long Straight Natural Looking 22 Inch "
                "[SEP] $24.99 [SEP] B093BKWHFK [SEP] Clip in Hair Extensions Wavy Synthetic [SEP] $15.99 to $19.99 "
                "[SEP] B07MKX3DRN [SEP] Wig Cap Nylon 2 Pack [SEP] $6.99",
                {"has_search_bar": False,
                 "clickables": ["back to search", "next >", "b09c337k8s", "b093bkwhfk", "b07mkx3drn"]}),
    "item": (f"Instruction: [SEP] {INSTRUCTION} [SEP] Back to Search [SEP] < Prev [SEP] color [SEP] natural black "
             "[SEP] dark brown [SEP] size [SEP] 22 inch [SEP] 24 inch [SEP] Hair Extensions Clip In Long Straight "
             "Natural Looking 22 Inch [SEP] Price: $24.99 [SEP] Rating: N.A. [SEP] Description [SEP] Features "
             "[SEP] Reviews [SEP] Buy Now",
             {"has_search_bar": False,
              "clickables": ["back to search", "< prev", "description", "features", "reviews", "buy now",
                             "natural black", "dark brown", "22 inch", "24 inch"]}),
    "features": (f"Instruction: [SEP] {INSTRUCTION} [SEP] Back to Search [SEP] < Prev [SEP] 100% human hair "
                 "[SEP] Natural looking and soft",
                 {"has_search_bar": False, "clickables": ["back to search", "< prev"]}),
    "done": ("Thank you for shopping with us! [SEP] Your score (min 0.0, max 1.0) [SEP] 0.75",
             {"has_search_bar": False, "clickables": []}),
}
MOVES = {("search", "search"): "results", ("results", "b09c337k8s"): "item", ("item", "features"): "features",
         ("features", "< prev"): "item", ("item", "< prev"): "results", ("item", "buy now"): "done"}


class RecordedTextEnv:
    """Replays PAGES with WebAgentTextEnv's interface (unavailable actions do nothing, as in WebShop)."""

    def __init__(self):
        self.server = SimpleNamespace(goals=[{"category": "beauty", "instruction_text": INSTRUCTION}] * 3)
        self.instruction_text, self.page, self.steps, self.closed = "", "search", [], 0

    def reset(self, session=None):
        self.page, self.instruction_text = "search", INSTRUCTION
        return PAGES["search"][0], None

    def get_available_actions(self):
        return PAGES[self.page][1]

    def step(self, action):
        self.steps.append(action)
        name, arg = parse_action(action)
        arg = (arg or "").lower()
        move = "search" if name == "search" else arg  # option clicks keep the item page
        self.page = "search" if arg == "back to search" else MOVES.get((self.page, move), self.page)
        done = self.page == "done"
        return PAGES[self.page][0], 0.75 if done else 0.0, done, None

    def close(self):
        self.closed += 1


@pytest.fixture
def real():
    return RealWebShopEnv(RecordedTextEnv(), RecordedTextEnv().server.goals, test_goals=2)


def test_real_pages_are_cleaned_and_actions_formatted(real):
    assert real.task_ids("test") == ["goal_00000", "goal_00001"] and real.task_ids("train") == ["goal_00002"]
    task, first = real.reset("goal_00000")
    assert (task.family, task.objective, first.observation) == ("beauty", INSTRUCTION, "Search")
    result = real.step("search[clip in hair extension]")
    assert result.observation.startswith(
        "Back to Search [SEP] Page 1 (Total results: 50) [SEP] Next > [SEP] B09C337K8S")
    assert "[SEP]  [SEP]" not in result.observation and INSTRUCTION not in result.observation
    assert result.admissible_actions == ["click[back to search]", "click[next >]", "click[b09c337k8s]",
                                         "click[b093bkwhfk]", "click[b07mkx3drn]"]


def test_real_bad_input_never_reaches_the_checkout(real):
    real.reset("goal_00000")
    real.step("search[clip in hair extension]")
    stepped = list(real.text_env.steps)
    for action in ("click[b0nonexist]", "search[again]", "click[]", "search[" + "y" * 10_000 + "]"):
        result = real.step(action)
        assert result.invalid and "Available actions: click[back to search], click[next >]" in result.observation
    assert real.text_env.steps == stepped


def test_real_purchase_and_close(real):
    real.reset("goal_00001")
    for action in ("search[hair extension]", "click[B09C337K8S]", "click[natural black]"):
        assert not real.step(action).invalid
    result = real.step("click[buy now]")
    assert (result.done, result.won, result.score) == (True, False, 0.75)
    real.close()
    real.close()
    assert real.text_env.closed == 1


def test_belief_and_teacher_read_real_pages(real):
    """The teacher shops on the recorded pages with no goal data at all (only page text)."""
    episode = Episode(real, EpisodeSettings(mode="adaptive", max_steps=20))
    episode.reset("goal_00000")
    rng = random.Random(0)
    while not episode.done:
        episode.step(episode.teacher_response(1.0, rng))
    record = episode.record
    env_actions = [t.action for t in record.turns if t.action_kind == "env"]
    assert record.invalid_count == 0 and env_actions[0].startswith("search[") and env_actions[-1] == "click[buy now]"
    assert "click[b09c337k8s]" in env_actions and record.score == 0.75
    belief = episode.belief
    assert belief.request.price_upper == 40.0 and "hair" in belief.request.keywords
    assert set(belief.candidates) == {"B09C337K8S", "B093BKWHFK", "B07MKX3DRN"}
    assert belief.candidates["B093BKWHFK"].price == (15.99, 19.99)
    assert belief.candidates["B09C337K8S"].options == {"color": ["natural black", "dark brown"],
                                                       "size": ["22 inch", "24 inch"]}


def test_clean_observation():
    raw = "Instruction: find a mug [SEP]  [SEP] Back to Search [SEP] x"
    assert clean_observation(raw, "find a mug") == "Back to Search [SEP] x"
    assert clean_observation("Thank you [SEP] 1", "find a mug") == "Thank you [SEP] 1"


def test_real_backend_without_a_path_names_the_setting(tmp_path):
    with pytest.raises(ValueError, match="env.webshop.webshop_path"):
        make_webshop_env(_cfg(tmp_path, backend="real"))


def test_real_backend_with_a_wrong_path_says_what_it_must_contain(tmp_path):
    missing = tmp_path / "WebShop"
    with pytest.raises(FileNotFoundError) as error:
        make_webshop_env(_cfg(tmp_path, backend="real", webshop_path=str(missing)))
    message = str(error.value)
    assert str(missing) in message and "web_agent_site/envs/web_agent_text_env.py" in message
    assert "setup.sh" in message


def _checkout(root, body):
    module = root / "web_agent_site" / "envs"
    module.mkdir(parents=True)
    (root / "web_agent_site" / "__init__.py").write_text("")
    (module / "__init__.py").write_text("")
    (module / "web_agent_text_env.py").write_text(textwrap.dedent(body))
    return root


@pytest.fixture
def isolated_imports(monkeypatch):
    monkeypatch.setattr(sys, "path", list(sys.path))
    yield
    for name in [m for m in sys.modules if m == "web_agent_site" or m.startswith("web_agent_site.")]:
        del sys.modules[name]


def test_real_backend_builds_the_text_env_of_a_checkout(tmp_path, isolated_imports):
    root = _checkout(tmp_path / "WebShop", """
        from types import SimpleNamespace

        class WebAgentTextEnv:
            def __init__(self, **kwargs):
                self.kwargs = kwargs
                self.server = SimpleNamespace(goals=[{"category": "fashion"}] * 600)
        """)
    env = make_webshop_env(_cfg(tmp_path, backend="real", webshop_path=str(root), real_num_products=1000))
    assert isinstance(env, RealWebShopEnv) and not isinstance(env.text_env, RecordedTextEnv)
    assert env.text_env.kwargs == {"observation_mode": "text", "num_products": 1000, "human_goals": True}
    assert len(env.task_ids("test")) == 20 and len(env.task_ids("train")) == 580


def test_real_backend_reports_a_broken_checkout(tmp_path, isolated_imports):
    root = _checkout(tmp_path / "WebShop", "import pyserini_is_not_installed\n")
    with pytest.raises(ImportError, match="setup.sh"):
        load_real_text_env(str(root), None)


def test_webshop_env_is_the_sim_backend(env):
    assert type(env) is WebShopEnv
