"""WebArena behind the environment contract (envs/base.py).

    env = make_webarena_env(env_cfg)     # (envs/webarena/__init__.py) env.webarena.backend: local (default) | webarena

`local`: the three bundled sites (sites.py) over the seeded database (data.py), the task
set of tasks.py, in a real headless Chromium driven by Playwright. Per environment: one
site server (a daemon thread, a free loopback port) and one browser context (proxied
through that server); per process: one Chromium (browser.py), shared by the process's
environments. Nothing starts until the first `reset`.

`webarena`: the real benchmark (real.py): tasks and evaluators from `browsergym-webarena`
on the sites at the user's `WA_*` URLs.

Contract details:
- task ids: `<split>/<site>/<template>/<k>`; splits `train` and `test` (`valid_seen` and
  `valid_unseen` are aliases of `test`); the family is the site (shop, admin, forum).
  The sites are static, so `seed` does not change an episode.
- observation: URL, open tabs, the last action's error (if any) and BrowserGym's
  accessibility tree with element ids, cut to `env.webarena.max_obs_tokens` (observation.py).
- actions: WebArena's native syntax (actions.py), mapped onto BrowserGym's action set and
  run on the context's active page; the action space is open (`admissible_actions` = []).
- invalid (`invalid=True`, the page unchanged, the reason as LAST ACTION ERROR): a malformed
  action, an element id not on the page, `goto` outside the configured sites, a closed tab,
  anything after `stop`. A page that does not finish loading within
  `env.webarena.page_timeout_s` is reported as the action's error (the episode goes on).
- `stop [answer]` ends the episode: score 1.0 or 0.0 from the task's evaluator, won = score 1.
- a site server that stopped raises (the episode errors with the reason; the worker's
  environment is discarded and rebuilt).
"""

from __future__ import annotations

import abc
import random
import time
from typing import Any, Optional

from evoharness_rl.envs.base import Environment, StepResult, Task, Teacher
from evoharness_rl.envs.webarena.actions import ActionError, BrowserAction, parse_action
from evoharness_rl.envs.webarena.belief import WebArenaBelief
from evoharness_rl.envs.webarena.observation import cut_to_budget, page_tree, render_observation
from evoharness_rl.envs.webarena.prompts import WEBARENA_SPEC
from evoharness_rl.envs.webarena.sites import HOSTS, SiteServer
from evoharness_rl.envs.webarena.tasks import LocalTask, build_tasks, evaluate

SPLIT_ALIASES = {"valid_seen": "test", "valid_unseen": "test"}
VIEWPORT = {"width": 1280, "height": 720}


class SiteDown(RuntimeError):
    """The local site server stopped mid-episode (the episode errors; never a policy failure)."""


def _first_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    message = text[0] if text else type(err).__name__
    message = message.replace("Locator.", "").replace("Page.", "")
    return message[:300]


class BrowserSession:
    """One browser context and its active page, acting through BrowserGym's action functions."""

    def __init__(self, host: Any, proxy: Optional[str], timeout_s: float, action_timeout_s: float):
        from browsergym.core.action.highlevel import HighLevelActionSet

        self.host = host
        self.proxy = proxy
        self.timeout_ms = int(timeout_s * 1000)
        action_set = HighLevelActionSet(subsets=["chat", "infeas", "bid", "nav", "tab"], multiaction=False,
                                        strict=True, demo_mode="off")
        self.namespace: dict[str, Any] = {"DEMO_MODE": False, "page": None,
                                          "send_message_to_user": lambda text: None,
                                          "report_infeasible_instructions": lambda text: None}
        # BrowserGym's element actions (click, fill, hover, ...) wait at most 500 ms, written into their source: on a
        # busy machine a click that navigates can take longer and then fails although the page changed.
        includes = action_set.python_includes.replace("timeout=500", f"timeout={int(action_timeout_s * 1000)}")
        exec(includes, self.namespace)  # noqa: S102 - BrowserGym's own action functions
        self.context: Any = None
        self.page: Any = None

    def open(self, url: str) -> str:
        """A fresh context (no history, cookies or tabs) with one page at `url`; returns a load error or ''."""
        self.close()
        kwargs: dict[str, Any] = {"viewport": VIEWPORT, "locale": "en-US", "timezone_id": "UTC"}
        if self.proxy:
            kwargs["proxy"] = {"server": self.proxy}
        self.context = self.host.new_context(**kwargs)
        self.context.set_default_timeout(self.timeout_ms)
        self.context.set_default_navigation_timeout(self.timeout_ms)
        self.page = self.context.new_page()
        try:
            self.page.goto(url, wait_until="load")
        except Exception as err:  # noqa: BLE001 - the observation reports it
            return f"the start page did not load: {_first_line(err)}"
        return ""

    def run(self, calls: list[str]) -> None:
        """Run BrowserGym high-level calls (e.g. "click('12')") on the active page."""
        for call in calls:
            self.namespace["page"] = self.page
            exec(call, self.namespace)  # noqa: S102 - calls built by actions.parse_action from validated parts
            self.page = self.namespace["page"]

    def settle(self) -> str:
        """Wait for the active page to load; pick a live page if it was closed. Returns a load error or ''."""
        pages = self.context.pages
        if not pages:
            self.page = self.context.new_page()
        elif self.page is None or self.page.is_closed() or self.page not in pages:
            self.page = pages[-1]
        try:
            self.page.wait_for_load_state("load", timeout=self.timeout_ms)
        except Exception as err:  # noqa: BLE001
            return f"the page did not finish loading within {self.timeout_ms / 1000:g}s ({_first_line(err)})"
        return ""

    def observe(self, error: str, budget: int) -> tuple[str, bool]:
        pages = self.context.pages
        titles = []
        for page in pages:
            try:
                titles.append(page.title())
            except Exception:  # noqa: BLE001 - a page mid-navigation
                titles.append("")
        active = pages.index(self.page) if self.page in pages else 0
        url = self.page.url
        if url in ("about:blank", ""):
            tree = "(blank page)"
        else:
            try:
                tree = page_tree(self.page)
            except Exception as err:  # noqa: BLE001 - e.g. a page that is still navigating
                tree, error = "(the page could not be read)", error or _first_line(err)
        tree, cut = cut_to_budget(tree, budget)
        return render_observation(url, titles, active, error, tree), cut

    def close(self) -> None:
        context, self.context, self.page = self.context, None, None
        if context is not None:
            try:
                context.close()
            except Exception:  # noqa: BLE001 - the browser may be gone already
                pass


class BrowserEnv(Environment):
    """What both WebArena backends share: one browser session on the process's Chromium, WebArena's
    action syntax limited to `allowed_hosts`, and the step loop. A backend sets up its tasks (`reset`),
    scores `stop` (`_stop`), and may check that its sites are still up (`_check_sites`)."""

    spec = WEBARENA_SPEC

    def __init__(self, allowed_hosts: Any, max_obs_tokens: int, page_timeout_s: float, action_timeout_s: float):
        self.allowed_hosts = tuple(allowed_hosts)
        self.max_obs_tokens = max_obs_tokens
        self.page_timeout_s = page_timeout_s
        self.action_timeout_s = action_timeout_s
        self.host: Any = None
        self.session: Optional[BrowserSession] = None
        self.task: Optional[Task] = None
        self.last_result: Optional[StepResult] = None
        self._done = False
        self._closed = False

    def step(self, action: str) -> StepResult:
        if self.task is None or self.session is None:
            raise RuntimeError("step() before reset(); call reset(task_id) first")
        self._check_sites()
        if self._done:
            return self._invalid("the episode is over (stop was called)")
        parsed = parse_action(action if isinstance(action, str) else "", self.allowed_hosts)
        if isinstance(parsed, ActionError):
            return self._invalid(parsed.reason)
        if parsed.kind == "stop":
            return self._stop(parsed)
        return self._act(parsed)

    def make_belief(self) -> WebArenaBelief:
        return WebArenaBelief()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self.session is not None:
            self.session.close()
            self.session = None
        if self.host is not None:
            self.host.release()
            self.host = None

    def _check_sites(self) -> None:
        """Raise if a site the episode needs has gone (the local backend's server)."""

    @abc.abstractmethod
    def _stop(self, parsed: BrowserAction) -> StepResult:
        """Score the episode's `stop [answer]` and end it."""

    def _open_session(self, proxy: Optional[str]) -> None:
        if self._closed:
            raise RuntimeError("the environment is closed")
        if self.host is None:
            from evoharness_rl.envs.webarena.browser import BrowserHost

            self.host = BrowserHost.shared()
        if self.session is None:
            self.session = BrowserSession(self.host, proxy, self.page_timeout_s, self.action_timeout_s)

    def _act(self, parsed: BrowserAction) -> StepResult:
        session = self.session
        assert session is not None
        start = time.monotonic()
        try:
            session.run(parsed.calls)
        except Exception as err:  # noqa: BLE001 - a failed browser action is feedback, never a crash
            session.settle()
            return self._invalid(_first_line(err))
        error = session.settle()
        observation, cut = session.observe(error, self.max_obs_tokens)
        self.last_result = StepResult(observation=observation, admissible_actions=[],
                                      info={"obs_cut": cut, "action_s": round(time.monotonic() - start, 3)})
        return self.last_result

    def _invalid(self, reason: str) -> StepResult:
        if self._done:
            return StepResult(observation=f"Invalid action: {reason}.", admissible_actions=[], done=True,
                              won=bool(self.last_result and self.last_result.won),
                              score=self.last_result.score if self.last_result else 0.0, invalid=True,
                              info={"reason": reason})
        assert self.session is not None
        observation, cut = self.session.observe(reason, self.max_obs_tokens)
        return StepResult(observation=observation, admissible_actions=[], invalid=True,
                          info={"reason": reason, "obs_cut": cut})


class WebArenaEnv(BrowserEnv):
    """The bundled local sites in a real headless Chromium (see module docstring)."""

    def __init__(self, db_path: Any, tasks: dict[str, LocalTask], max_obs_tokens: int = 1024,
                 page_timeout_s: float = 10.0, action_timeout_s: float = 3.0):
        super().__init__(HOSTS, max_obs_tokens, page_timeout_s, action_timeout_s)
        self.db_path = db_path
        self.tasks = tasks
        self.local_task: Optional[LocalTask] = None
        self.server: Optional[SiteServer] = None

    @classmethod
    def from_config(cls, env_cfg: Any) -> "WebArenaEnv":
        from evoharness_rl.envs.webarena.data import open_db, prepare

        path = prepare(env_cfg)
        db = open_db(path)
        try:
            tasks = build_tasks(db, env_cfg.webarena.generator_seed)
        finally:
            db.close()
        return cls(path, tasks, env_cfg.webarena.max_obs_tokens, env_cfg.webarena.page_timeout_s,
                   env_cfg.webarena.action_timeout_s)

    # -- contract ------------------------------------------------------------------------

    def task_ids(self, split: str) -> list[str]:
        split = SPLIT_ALIASES.get(split, split)
        return [t for t in self.tasks if t.startswith(split + "/")]

    def task_family(self, task_id: str) -> str:
        return self._task(task_id).site

    def reset(self, task_id: str, seed: int = 0) -> tuple[Task, StepResult]:
        local = self._task(task_id)
        self._start()
        assert self.session is not None
        error = self.session.open(local.start_url)
        self.local_task = local
        self.task = Task(task_id=task_id, family=local.site, objective=local.objective, split=local.split,
                         info={"site": local.site, "template": local.template, "start_url": local.start_url,
                               "multi_page": local.multi_page})
        self._done = False
        observation, cut = self.session.observe(error, self.max_obs_tokens)
        self.last_result = StepResult(observation=observation, admissible_actions=[], info={"obs_cut": cut})
        return self.task, self.last_result

    def _check_sites(self) -> None:
        if self.server is None or not self.server.running:
            raise SiteDown("the local site server stopped during the episode")

    def make_teacher(self, enabled_verbs: tuple[str, ...], harness_rate: float, rng: random.Random) -> Teacher:
        from evoharness_rl.envs.webarena.teacher import ScriptedBrowser

        if self.task is None:
            raise RuntimeError("make_teacher() before reset(); the teacher solves the current task")
        return ScriptedBrowser(self, enabled_verbs, harness_rate, rng)

    def close(self) -> None:
        closed = self._closed
        super().close()
        if not closed and self.server is not None:
            self.server.stop()
            self.server = None

    # -- helpers -------------------------------------------------------------------------

    def _task(self, task_id: str) -> LocalTask:
        if task_id not in self.tasks:
            raise KeyError(f"unknown WebArena task id {task_id!r}; expected one listed by task_ids(split), "
                           "e.g. test/shop/price/000")
        return self.tasks[task_id]

    def _start(self) -> None:
        if self._closed:
            raise RuntimeError("the environment is closed")
        if self.server is None:
            self.server = SiteServer(self.db_path).start()
        self._open_session(self.server.proxy)

    def _stop(self, parsed: BrowserAction) -> StepResult:
        assert self.local_task is not None and self.session is not None
        url = self.session.page.url if self.session.page is not None else ""
        score, reason = evaluate(self.local_task, parsed.answer, url)
        self._done = True
        self.last_result = StepResult(observation=f"Stopped with answer: {parsed.answer or '(none)'}",
                                      admissible_actions=[], done=True, won=score >= 1.0, score=score,
                                      info={"answer": parsed.answer, "final_url": url, "evaluation": reason})
        return self.last_result
