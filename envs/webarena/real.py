"""Real WebArena (`env.webarena.backend=webarena`): the benchmark's sites, tasks and evaluators.

A thin path over `browsergym-webarena`: its `GenericWebArenaTask` logs in, opens the
start page (`setup(page)`) and scores the final state and answer (`validate(page,
chat_messages)`, WebArena's own evaluators); everything else is the local backend's
machinery (browser.py's Chromium, the adapter's `BrowserSession`, actions, observations).

Installed by `make setup` in two steps, because `pip install browsergym-webarena` would
replace this project's transformers: `libwebarena` 0.0.4 depends on `text-generation`
0.7.0, which declares `huggingface-hub<1.0`, so pip falls back to transformers 4.57 (hub
0.36) and datasets 5.0. The three packages go in with `--no-deps` and the rest of
libwebarena's dependencies from the `webarena-real` extra (they resolve with the stack);
`text-generation` is only imported, never called (WebArena's TGI client), and works with
hub 2.x. NLTK's `punkt_tab` data is a download from GitHub (`python -m nltk.downloader
punkt_tab`), not made by setup (docs/webarena.md, "Real WebArena").

Before any browser starts, `check_setup` turns each missing piece into one line naming
the fix: the `WA_*` site URLs, a site that does not answer, the NLTK data, the package.

Tasks: WebArena's task ids, without the backend-edit tasks (paper: those evaluated by
`program_html`, which change the sites' state; 401 of 812 remain); family = the paper's
site column (SP, CMS, Maps, G&R: a task's first site that is a column); test = every
other remaining task (`env.webarena.real_test_fraction`).
"""

from __future__ import annotations

import os
import random
import urllib.error
import urllib.request
from typing import Any

from evoharness_rl.envs.base import StepResult, Task, Teacher
from evoharness_rl.envs.webarena.actions import BrowserAction
from evoharness_rl.envs.webarena.adapter import SPLIT_ALIASES, BrowserEnv
from evoharness_rl.errors import UserError

SITE_VARS = ("WA_SHOPPING", "WA_SHOPPING_ADMIN", "WA_REDDIT", "WA_GITLAB", "WA_WIKIPEDIA", "WA_MAP", "WA_HOMEPAGE")
FAMILIES = {"shopping": "SP", "shopping_admin": "CMS", "map": "Maps", "gitlab": "G&R", "reddit": "G&R"}
# the paper's site columns; Wikipedia is no column of its own (its tasks also use the map: they count as Maps)
SEE_DOCS = "see docs/webarena.md, 'Real WebArena'"


class WebArenaSetupError(UserError):
    """The real-site backend cannot run here; the message names the fix."""


def check_setup(timeout_s: float = 5.0) -> dict[str, str]:
    """The site URLs, after checking every requirement of the real backend (raises WebArenaSetupError)."""
    missing = [v for v in SITE_VARS if not os.environ.get(v)]
    if missing:
        raise WebArenaSetupError(f"env.webarena.backend=webarena needs the WebArena site URLs: set {', '.join(missing)} "
                                 f"(e.g. export WA_SHOPPING=http://<host>:7770) or use env.webarena.backend=local; "
                                 f"{SEE_DOCS}")
    urls = {v: os.environ[v].rstrip("/") for v in SITE_VARS}
    for var, url in urls.items():
        try:
            urllib.request.urlopen(url, timeout=timeout_s).close()  # noqa: S310 - the user's own site URL
        except urllib.error.HTTPError:
            pass  # the site answered (a login page or a redirect status is fine)
        except (OSError, ValueError) as err:
            raise WebArenaSetupError(f"{var}={url} does not answer ({getattr(err, 'reason', err)}); start the WebArena "
                                     f"site containers or fix the URL; {SEE_DOCS}") from err
    try:
        import nltk

        nltk.data.find("tokenizers/punkt_tab")
    except ImportError as err:
        raise WebArenaSetupError(f"nltk is not installed; pip install -e '.[webarena-real]' (or make setup), then "
                                 f"python -m nltk.downloader punkt_tab; {SEE_DOCS}") from err
    except LookupError as err:
        raise WebArenaSetupError(f"NLTK data punkt_tab is missing (WebArena's evaluators need it); "
                                 f"python -m nltk.downloader punkt_tab; {SEE_DOCS}") from err
    try:
        import browsergym.webarena  # noqa: F401
    except ImportError as err:
        raise WebArenaSetupError(f"browsergym-webarena is not installed ({err}); pip install -e '.[webarena-real]' && "
                                 f"pip install --no-deps browsergym-webarena==0.14.3 libwebarena==0.0.4 "
                                 f"text-generation==0.7.0 (or make setup); {SEE_DOCS}") from err
    return urls


def paper_subset() -> list[tuple[int, str]]:
    """(task id, family) of WebArena's tasks without backend edits (no program_html evaluation)."""
    import importlib.resources
    import json

    import webarena

    configs = json.loads(importlib.resources.files(webarena).joinpath("test.raw.json").read_text())
    kept = []
    for conf in configs:
        if "program_html" in conf["eval"]["eval_types"]:
            continue
        sites = conf.get("sites") or ["shopping"]
        family = next((FAMILIES[site] for site in sites if site in FAMILIES), sites[0])
        kept.append((int(conf["task_id"]), family))
    return sorted(kept)


class RealWebArenaEnv(BrowserEnv):
    """WebArena's real sites through browsergym-webarena (see module docstring)."""

    def __init__(self, tasks: list[tuple[int, str]], urls: dict[str, str], test_fraction: float, max_obs_tokens: int,
                 page_timeout_s: float, action_timeout_s: float):
        every = max(1, round(1 / test_fraction)) if test_fraction > 0 else 0
        self.splits = {"test": [], "train": []}
        self.families: dict[str, str] = {}
        for i, (task_id, family) in enumerate(tasks):
            split = "test" if every and i % every == 0 else "train"
            key = f"{split}/{family}/{task_id}"
            self.splits[split].append(key)
            self.families[key] = family
        from urllib.parse import urlsplit

        super().__init__(sorted({urlsplit(u).hostname or "" for u in urls.values()}), max_obs_tokens, page_timeout_s,
                         action_timeout_s)
        self.wa_task: Any = None

    @classmethod
    def from_config(cls, env_cfg: Any) -> "RealWebArenaEnv":
        urls = check_setup()
        subset = paper_subset()
        if env_cfg.webarena.real_task_ids:
            wanted = set(env_cfg.webarena.real_task_ids)
            subset = [t for t in subset if t[0] in wanted]
        return cls(subset, urls, env_cfg.webarena.real_test_fraction, env_cfg.webarena.max_obs_tokens,
                   env_cfg.webarena.page_timeout_s, env_cfg.webarena.action_timeout_s)

    def task_ids(self, split: str) -> list[str]:
        return list(self.splits.get(SPLIT_ALIASES.get(split, split), []))

    def task_family(self, task_id: str) -> str:
        return self.families[task_id]

    def reset(self, task_id: str, seed: int = 0) -> tuple[Task, StepResult]:
        from browsergym.webarena.task import GenericWebArenaTask

        if task_id not in self.families:
            raise KeyError(f"unknown WebArena task id {task_id!r}; expected one listed by task_ids(split)")
        self._open_session(None)
        assert self.session is not None
        self.session.open("about:blank")
        self.wa_task = GenericWebArenaTask(seed=seed, task_id=int(task_id.rsplit("/", 1)[1]))
        goal, _ = self.wa_task.setup(self.session.page)
        self.session.page = self.session.context.pages[-1]
        self.task = Task(task_id=task_id, family=self.families[task_id], objective=goal,
                         split=task_id.split("/", 1)[0], info={"webarena_task_id": int(task_id.rsplit("/", 1)[1])})
        self._done = False
        observation, cut = self.session.observe(self.session.settle(), self.max_obs_tokens)
        self.last_result = StepResult(observation=observation, admissible_actions=[], info={"obs_cut": cut})
        return self.task, self.last_result

    def _stop(self, parsed: BrowserAction) -> StepResult:
        """Scored by WebArena's own evaluator on the page the episode ended on."""
        assert self.session is not None
        score, _, _, info = self.wa_task.validate(self.session.page, [{"role": "assistant", "message": parsed.answer}])
        self._done = True
        self.last_result = StepResult(f"Stopped with answer: {parsed.answer or '(none)'}", [], done=True,
                                      won=float(score) >= 1.0, score=float(score),
                                      info={"answer": parsed.answer, **{k: str(v) for k, v in info.items()}})
        return self.last_result

    def make_teacher(self, enabled_verbs: tuple[str, ...], harness_rate: float, rng: random.Random) -> Teacher:
        raise UserError("the scripted teacher solves the local tasks only; collect on the real sites with "
                        "policy=openai (any LLM endpoint) instead")
