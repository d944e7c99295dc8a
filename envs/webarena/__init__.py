"""WebArena: web tasks in a real headless Chromium, on bundled local sites or the real benchmark.

Files, in the order an episode uses them:
- browser.py      Debian's Chromium under Playwright: launch, PLAYWRIGHT_BROWSERS_PATH, cleanup
- data.py         the local sites' seeded SQLite data (`prepare`)
- sites.py        the three local sites (shop, admin, forum) behind one loopback server
- tasks.py        the local task set and its evaluators
- actions.py      WebArena's native actions, mapped onto BrowserGym's action set
- observation.py  BrowserGym's accessibility tree with element ids, cut to a token budget
- adapter.py      the local backend's Environment and the browser session it shares with real.py
- real.py         backend webarena: the real sites through browsergym-webarena
- belief.py       the Belief tracker (pages, trail, controls, values seen)
- teacher.py      the scripted browser (the `scripted` policy and collect's teacher)
- prompts.py      the paper's WebArena prompts and the EnvSpec
"""

from typing import Any

from evoharness_rl.envs.base import Environment


def make_webarena_env(env_cfg: Any) -> Environment:
    """Build the WebArena environment of an `EnvConfig` (backend local or webarena)."""
    backend = env_cfg.webarena.backend
    if backend == "local":
        from evoharness_rl.envs.webarena.adapter import WebArenaEnv

        return WebArenaEnv.from_config(env_cfg)
    if backend == "webarena":
        from evoharness_rl.envs.webarena.real import RealWebArenaEnv

        return RealWebArenaEnv.from_config(env_cfg)
    raise ValueError(f"env.webarena.backend={backend!r} is not valid; expected local or webarena")
