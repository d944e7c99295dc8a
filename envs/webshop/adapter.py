"""WebShop behind the environment contract (envs/base.py).

    env = make_webshop_env(env_cfg)     # env.webshop.backend: sim (default) | real

Both backends are driven through WebShop's text-env interface (`reset(session=i)`,
`step(action)`, `get_available_actions()`, `instruction_text`):
- `sim`: our `WebShopTextSim` over the generated catalogue (prepared on first use);
- `real`: `web_agent_site.envs.web_agent_text_env.WebAgentTextEnv(observation_mode="text")`
  imported from the checkout at `env.webshop.webshop_path`, run in-process with its
  human goals.

Contract details:
- task ids are `goal_<index>` (zero-padded); splits: test = goals 0..test_goals-1
  (aliases valid_seen, valid_unseen), train = the rest. The task family is the goal's
  product category (fashion, beauty, grocery, electronics, furniture in the simulator).
  WebShop is deterministic, so `seed` does not change an episode.
- observation: the page's visible text joined with " [SEP] ", empty pieces dropped and
  the instruction header removed (the instruction is the OBJECTIVE of every turn).
- admissible actions: `search[<your query>]` when the page has a search bar, then
  `click[<button>]` for every clickable (WebShop's lowercased texts).
- an action that is not available (unknown button, search without a search bar, empty
  or over-long query, anything after Buy Now) is `invalid`: the observation starts with
  the reason and the available actions, followed by the unchanged page.
- Buy Now ends the episode: score = WebShop reward, won = (reward == 1.0).
"""

from __future__ import annotations

import random
import re
import sys
from pathlib import Path
from typing import Any, Optional

from evoharness_rl.envs.base import Environment, StepResult, Task, Teacher
from evoharness_rl.envs.webshop.belief import WebShopBelief
from evoharness_rl.envs.webshop.catalogue import load_catalogue, prepare, split_indices
from evoharness_rl.envs.webshop.prompts import WEBSHOP_SPEC
from evoharness_rl.envs.webshop.simulator import SEP, WebShopTextSim, parse_action
from evoharness_rl.envs.webshop.teacher import ScriptedShopper

MAX_QUERY_CHARS = 300  # a longer search query is invalid (WebShop queries are a few keywords)
SEARCH_ACTION = "search[<your query>]"
_TASK_ID = re.compile(r"^goal_(\d+)$")
REAL_CHECKOUT_HINT = (
    "a WebShop checkout (git clone https://github.com/princeton-nlp/WebShop, then its setup.sh) containing "
    "web_agent_site/envs/web_agent_text_env.py and the data and search index that setup.sh downloads"
)


def task_id_of(index: int) -> str:
    return f"goal_{index:05d}"


def clean_observation(raw: str, instruction: str) -> str:
    """Visible text without empty pieces and without the instruction header."""
    segments = [s.strip() for s in raw.split("[SEP]") if s.strip()]
    wanted = instruction.strip().lower()
    for i, segment in enumerate(segments[:4]):
        if wanted and wanted in segment.lower():
            segments = segments[i + 1:]
            break
    return SEP.join(segments)


def format_actions(available: dict[str, Any]) -> list[str]:
    actions = [SEARCH_ACTION] if available.get("has_search_bar") else []
    return actions + [f"click[{c}]" for c in available.get("clickables", []) if c != "search"]


class WebShopEnv(Environment):
    """WebShop over a text env (our simulator by default; see RealWebShopEnv)."""

    spec = WEBSHOP_SPEC

    def __init__(self, text_env: Any, goals: list[dict], test_goals: int):
        self.text_env = text_env
        self.goals = goals
        self.test_goals = test_goals
        self.task: Optional[Task] = None
        self.last_result: Optional[StepResult] = None  # what the policy currently sees
        self._available: dict[str, Any] = {}
        self._page = ""
        self._done = False
        self._closed = False

    @classmethod
    def from_config(cls, env_cfg: Any) -> "WebShopEnv":
        catalogue = load_catalogue(prepare(env_cfg))
        sim = WebShopTextSim(catalogue, results_per_page=env_cfg.webshop.results_per_page)
        return cls(sim, catalogue.goals, env_cfg.webshop.test_goals)

    # -- contract ------------------------------------------------------------------------

    def task_ids(self, split: str) -> list[str]:
        return [task_id_of(i) for i in split_indices(split, len(self.goals), self.test_goals)]

    def task_family(self, task_id: str) -> str:
        return str(self.goals[self._index(task_id)].get("category") or "webshop")

    def reset(self, task_id: str, seed: int = 0) -> tuple[Task, StepResult]:
        index = self._index(task_id)
        raw, _ = self.text_env.reset(session=index)
        goal = self.goals[index]
        self.task = Task(
            task_id=task_id,
            family=str(goal.get("category") or "webshop"),
            objective=self.text_env.instruction_text,
            split="test" if index < self.test_goals else "train",
            info={"goal_index": index},
        )
        self._done = False
        self.last_result = self._observe(raw)
        return self.task, self.last_result

    def step(self, action: str) -> StepResult:
        if self.task is None:
            raise RuntimeError("step() before reset(); call reset(task_id) first")
        reason = self._check(action)
        if reason:
            return self._invalid(reason)
        raw, reward, done, _ = self.text_env.step(action)
        result = self._observe(raw)
        if done:
            self._done = True
            reward = float(reward)
            result.done, result.score, result.won = True, reward, reward >= 1.0
            result.info = {"reward": reward, **(getattr(self.text_env, "reward_info", None) or {})}
        self.last_result = result
        return result

    def make_belief(self) -> WebShopBelief:
        return WebShopBelief()

    def make_teacher(self, enabled_verbs: tuple[str, ...], harness_rate: float, rng: random.Random) -> Teacher:
        if self.task is None:
            raise RuntimeError("make_teacher() before reset(); the teacher shops for the current task")
        return ScriptedShopper(self, enabled_verbs, harness_rate, rng)

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            close = getattr(self.text_env, "close", None)
            if callable(close):
                close()

    # -- helpers -------------------------------------------------------------------------

    def _index(self, task_id: str) -> int:
        match = _TASK_ID.match(str(task_id))
        if not match or int(match.group(1)) >= len(self.goals):
            raise KeyError(f"unknown WebShop task id {task_id!r}; expected goal_<n> with n < {len(self.goals)}, "
                           "as listed by task_ids(split)")
        return int(match.group(1))

    def _observe(self, raw: str) -> StepResult:
        self._available = self.text_env.get_available_actions()
        self._page = clean_observation(raw, self.text_env.instruction_text)
        return StepResult(observation=self._page, admissible_actions=format_actions(self._available))

    def _check(self, action: Any) -> Optional[str]:
        """Why `action` cannot be taken now (None: it can)."""
        if self._done:
            return "the episode is over (Buy Now was clicked)"
        name, arg = parse_action(action if isinstance(action, str) else "")
        if name is None:
            return f"'{str(action)[:80]}' is not a WebShop action; use search[<query>] or click[<button>]"
        if name == "search":
            if not self._available.get("has_search_bar"):
                return "search[...] works only on the search page; click[back to search] first"
            if not arg:
                return "search[] needs a query, e.g. search[navy long sleeve shirt]"
            if len(arg) > MAX_QUERY_CHARS:
                return f"the query is {len(arg)} characters long; use at most {MAX_QUERY_CHARS} (a few keywords)"
            return None
        clickables = [c for c in self._available.get("clickables", []) if c != "search"]
        if arg.lower() not in clickables:
            return f"'{arg[:80]}' is not a button on this page"
        return None

    def _invalid(self, reason: str) -> StepResult:
        actions = format_actions(self._available) if not self._done else []
        listed = ", ".join(actions) if actions else "none (the episode is over)"
        text = f"Invalid action: {reason}. Available actions: {listed}."
        observation = f"{text}\n{self._page}" if self._page else text
        return StepResult(observation=observation, admissible_actions=actions, done=self._done, invalid=True,
                          score=self.last_result.score if self.last_result else 0.0,
                          won=bool(self.last_result and self.last_result.won), info={"reason": reason})


class RealWebShopEnv(WebShopEnv):
    """WebShop from a real checkout (`env.webshop.backend=real`), driven in-process."""

    @classmethod
    def from_config(cls, env_cfg: Any) -> "RealWebShopEnv":
        text_env = load_real_text_env(env_cfg.webshop.webshop_path, env_cfg.webshop.real_num_products)
        return cls(text_env, text_env.server.goals, env_cfg.webshop.test_goals)


def load_real_text_env(webshop_path: Optional[str], num_products: Optional[int]) -> Any:
    """Import `web_agent_site` from a WebShop checkout and build its text env (human goals)."""
    if not webshop_path:
        raise ValueError(f"env.webshop.backend=real needs env.webshop.webshop_path: the folder of {REAL_CHECKOUT_HINT}")
    root = Path(webshop_path).expanduser().resolve()
    module = root / "web_agent_site" / "envs" / "web_agent_text_env.py"
    if not module.is_file():
        raise FileNotFoundError(
            f"env.webshop.webshop_path={webshop_path!r}: {module} does not exist; expected {REAL_CHECKOUT_HINT}")
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    try:
        from web_agent_site.envs.web_agent_text_env import WebAgentTextEnv  # type: ignore[import-not-found]
    except ImportError as error:
        raise ImportError(
            f"could not import web_agent_site from {root} ({error}); install the checkout's requirements with its "
            "setup.sh (pyserini and Java, spaCy en_core_web_lg, gym, flask)") from error
    return WebAgentTextEnv(observation_mode="text", num_products=num_products, human_goals=True)


def make_webshop_env(env_cfg: Any) -> WebShopEnv:
    """Build the WebShop environment of an `EnvConfig` (backend sim or real)."""
    backend = env_cfg.webshop.backend
    if backend == "sim":
        return WebShopEnv.from_config(env_cfg)
    if backend == "real":
        return RealWebShopEnv.from_config(env_cfg)
    raise ValueError(f"env.webshop.backend={backend!r} is not valid; expected sim or real")
