"""WebArena: web tasks in a real headless Chromium, on bundled local sites or the real benchmark.

Files, in the order an episode uses them:
- browser.py      Debian's Chromium under Playwright: launch, PLAYWRIGHT_BROWSERS_PATH, cleanup
- data.py         the local sites' seeded SQLite data (`prepare`)
- sites.py        the three local sites (shop, admin, forum) behind one loopback server
- tasks.py        the local task set and its evaluators
- actions.py      WebArena's native actions, mapped onto BrowserGym's action set
- observation.py  BrowserGym's accessibility tree with element ids, cut to a token budget
- adapter.py      `make_webarena_env(env_cfg)`: backend local (default) or webarena
- real.py         backend webarena: the real sites through browsergym-webarena
- belief.py       the Belief tracker (pages, trail, controls, values seen)
- teacher.py      the scripted browser (the `scripted` policy and collect's teacher)
- prompts.py      the paper's WebArena prompts and the EnvSpec
"""
