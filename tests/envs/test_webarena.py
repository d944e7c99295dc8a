"""WebArena local backend: action syntax, observations, tasks, bad input and process cleanup (real Chromium)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from evoharness_rl.envs.webarena.actions import ActionError, BrowserAction, parse_action
from evoharness_rl.envs.webarena.observation import CUT_MARKER, count_tokens, cut_to_budget
from evoharness_rl.envs.webarena.tasks import LocalTask, evaluate, normalise
from tests.fakes.processes import assert_gone, descendants as _descendants, kill_and_expect_cleanup

HOSTS = ("shop.test", "admin.test", "forum.test")


@pytest.mark.parametrize("text,calls", [
    ("click [12]", ["click('12')"]),
    ("CLICK[a12]", ["click('a12')"]),
    ("hover [7]", ["hover('7')"]),
    ("type [11] [blue kettle] [1]", ["fill('11', 'blue kettle')", "press('11', 'Enter')"]),
    ("type [11] [blue kettle] [0]", ["fill('11', 'blue kettle')"]),
    ("type [11] [it's [x]]", ["fill('11', \"it's [x]\")", "press('11', 'Enter')"]),
    ("press [Ctrl+a]", ["keyboard_press('Control+a')"]),
    ("press [enter]", ["keyboard_press('Enter')"]),
    ("scroll [down]", ["scroll(0, 600)"]),
    ("scroll [direction=up]", ["scroll(0, -600)"]),
    ("new_tab", ["new_tab()"]),
    ("tab_focus [1]", ["tab_focus(1)"]),
    ("close_tab", ["tab_close()"]),
    ("go_back", ["go_back()"]),
    ("go_forward", ["go_forward()"]),
    ("goto [http://shop.test/search?q=x]", ["goto('http://shop.test/search?q=x')"]),
    ("stop [$12.50]", []),
])
def test_native_actions_map_onto_browsergym_calls(text, calls):
    parsed = parse_action(text, HOSTS)
    assert isinstance(parsed, BrowserAction) and parsed.calls == calls


@pytest.mark.parametrize("text,reason", [
    ("", "empty action"),
    ("click 12", "malformed click"),
    ("click [12", "malformed click"),
    ("click [abc]", "malformed click"),
    ("type [12]", "malformed type"),
    ("press [Hyper+q]", "unknown key"),
    ("scroll [left]", "malformed scroll"),
    ("go_back [1]", "takes no argument"),
    ("goto [http://example.com/]", "goto refused"),
    ("goto [shop.test]", "full http URL"),
    ("fly [away]", "not a browser action"),
    ("stop", "malformed stop"),
])
def test_malformed_actions_are_errors_that_show_the_right_form(text, reason):
    parsed = parse_action(text, HOSTS)
    assert isinstance(parsed, ActionError) and reason in parsed.reason


def test_element_actions_wait_for_the_configured_action_timeout():
    """BrowserGym writes a 0.5 s limit into its element actions; the session runs them with env.webarena.action_timeout_s."""
    from evoharness_rl.envs.webarena.adapter import BrowserSession

    def constants(code) -> list:  # the function's literals and those of the functions defined inside it
        return [c for const in code.co_consts for c in (constants(const) if hasattr(const, "co_consts") else [const])]

    session = BrowserSession(host=None, proxy=None, timeout_s=10.0, action_timeout_s=2.5)
    for name in ("click", "fill", "hover"):
        literals = constants(session.namespace[name].__code__)
        assert 2500 in literals and 500 not in literals, name


def test_cut_to_budget_keeps_whole_lines_and_marks_the_cut():
    tree = "\n".join(f"[{i}] link 'Product number {i}'" for i in range(100))
    text, cut = cut_to_budget(tree, 80)
    assert cut and text.splitlines()[-1] == CUT_MARKER.format(lines=100 - (len(text.splitlines()) - 1), budget=80)
    assert count_tokens("\n".join(text.splitlines()[:-1])) <= 80
    assert cut_to_budget(tree, 80) == (text, cut)  # deterministic
    assert cut_to_budget(tree, 10_000) == (tree, False)


def test_answers_are_normalised_before_matching():
    task = LocalTask("test/shop/price/000", "shop", "price", "?", "http://shop.test/", "exact", "$1,024.50")
    assert evaluate(task, "1024.5", "")[0] == 1.0
    assert evaluate(task, " $1,024.50. ", "")[0] == 1.0
    assert evaluate(task, "1024.49", "")[0] == 0.0
    assert normalise("Complete.") == normalise("complete") and normalise("07") == "7"
    nav = LocalTask("t", "forum", "open_profile", "?", "", "url", "http://forum.test/user/a_b")
    assert evaluate(nav, "", "http://forum.test/user/a_b/")[0] == 1.0
    assert evaluate(nav, "", "http://forum.test/user/b_a")[0] == 0.0


def test_task_set_sizes_families_and_disjoint_entities(webarena_env_factory):
    env = webarena_env_factory()
    test, train = env.task_ids("test"), env.task_ids("train")
    assert len(test) >= 30 and len(train) >= 60 and env.task_ids("valid_seen") == test
    assert {env.task_family(t) for t in test} == {env.task_family(t) for t in train} == {"shop", "admin", "forum"}
    assert sum(env.tasks[t].multi_page for t in test) >= 6
    for template in {env.tasks[t].template for t in test}:
        seen_test = {str(env.tasks[t].params) for t in test if env.tasks[t].template == template}
        seen_train = {str(env.tasks[t].params) for t in train if env.tasks[t].template == template}
        assert not seen_test & seen_train, template
    other = webarena_env_factory()
    assert other.tasks == env.tasks  # deterministic given the seed


def _bid(observation: str, role: str, name: str) -> str:
    return re.search(rf"\[(\w+)\] {role} '{re.escape(name)}'", observation).group(1)


def test_episode_bad_input_is_feedback_and_the_page_stays(webarena_env_factory):
    env = webarena_env_factory()
    task, first = env.reset("test/shop/price/000")
    assert first.observation.startswith("URL: http://shop.test/\nOPEN TABS: [0] Home | OneStop Market (current)")
    for action, reason in (("click [9999]", 'Could not find element with bid "9999"'),
                           ("goto [http://example.com/]", "goto refused"), ("tab_focus [5]", "list index")):
        result = env.step(action)
        assert result.invalid and reason in result.info["reason"], (action, result.info)
        assert f"LAST ACTION ERROR: {result.info['reason']}" in result.observation
        assert "URL: http://shop.test/\n" in result.observation  # unchanged page
    box = _bid(first.observation, "textbox", "Search products")
    result = env.step(f"type [{box}] [{task.info and env.local_task.params['name']}] [1]")
    assert not result.invalid and "URL: http://shop.test/search?q=" in result.observation
    result = env.step("new_tab")
    assert "[1] New Tab (current)" in result.observation and "(blank page)" in result.observation
    result = env.step("close_tab")
    assert "OPEN TABS: [0] Search" in result.observation
    result = env.step("stop [$0.01]")
    assert result.done and not result.won and result.score == 0.0
    after = env.step("click [1]")
    assert after.invalid and after.done and "episode is over" in after.info["reason"]


def test_the_browser_reaches_no_host_but_the_configured_sites(webarena_env_factory):
    """Besides goto's refusal: a page that leaves the sites by itself (a script, a redirect) gets the proxy's
    "Blocked" page for any other http host and no page at all over https; nothing leaves the machine."""
    env = webarena_env_factory()
    env.reset("test/shop/price/000")
    page = env.session.page
    response = page.goto("http://example.com/anything")
    assert response.status == 403 and page.title() == "Blocked"
    observation = env.step("scroll [down]").observation
    assert "URL: http://example.com/anything" in observation and "is not one of the configured sites" in observation
    with pytest.raises(Exception, match="ERR_"):  # the proxy refuses CONNECT: Chromium reports a network error
        page.goto("https://example.com/")
    assert not env.step("goto [http://shop.test/]").invalid


def test_a_page_that_never_loads_is_reported_and_the_episode_goes_on(webarena_data):
    from evoharness_rl.config import EnvConfig
    from evoharness_rl.envs import make_env

    cfg = EnvConfig(name="webarena", data_dir=webarena_data)
    cfg.webarena.page_timeout_s = 1.0
    env = make_env(cfg)
    try:
        _, first = env.reset("test/shop/cheapest/000")
        env.server.delay_requests(3.0)
        started = time.monotonic()
        result = env.step(f"click [{_bid(first.observation, 'link', 'Garden')}]")
        assert time.monotonic() - started < 8
        assert "LAST ACTION ERROR:" in result.observation and re.search(r"[Tt]imeout|did not finish loading",
                                                                         result.observation)
        env.server.delay_requests(0.0)
        result = env.step("goto [http://shop.test/category/garden]")
        assert not result.invalid and "heading 'Garden'" in result.observation
    finally:
        env.close()


def test_a_site_server_that_stops_errors_the_episode(webarena_env_factory):
    from evoharness_rl.envs.webarena.adapter import SiteDown

    env = webarena_env_factory()
    env.reset("test/forum/comments/000")
    env.server.stop()
    with pytest.raises(SiteDown, match="site server stopped"):
        env.step("scroll [down]")


def test_close_leaves_no_browser_or_driver_process(webarena_env_factory):
    before = _descendants(os.getpid())
    first, second = webarena_env_factory(), webarena_env_factory()  # two contexts, one Chromium
    first.reset("test/admin/order_status/000")
    second.reset("test/forum/author/000")
    started = _descendants(os.getpid()) - before
    assert started, "Chromium and Playwright's driver should run while an episode is open"
    first.close()
    assert not second.step("scroll [down]").invalid  # the shared browser still serves the second environment
    second.close()
    assert_gone(started, grace_s=10, what="close")


SCRIPT = textwrap.dedent("""
    import sys, time
    from evoharness_rl.config import EnvConfig
    from evoharness_rl.envs import make_env
    env = make_env(EnvConfig(name="webarena", data_dir=sys.argv[1]))
    env.reset("test/shop/price/000")
    print("ready", flush=True)
    time.sleep(120)
""")


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_a_killed_owner_leaves_no_browser_process(webarena_data, sig):
    proc = subprocess.Popen([sys.executable, "-c", SCRIPT, webarena_data], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        started = _descendants(proc.pid)
        assert started
        kill_and_expect_cleanup(proc, started, sig, wait_s=10, grace_s=15)
    finally:
        if proc.poll() is None:
            proc.kill()


def test_belief_keeps_trail_values_and_controls(webarena_env_factory):
    import random

    from evoharness_rl.harness.protocol import parse_response

    env = webarena_env_factory()
    task, first = env.reset("test/admin/customer_orders/000")
    belief = env.make_belief()
    belief.reset(task, first)
    teacher = env.make_teacher((), 0.0, random.Random(0))
    for _ in range(6):
        action = parse_response(teacher.respond(), "fenced", ()).action
        if action.startswith("stop"):
            break
        belief.update(action, env.step(action))
    number = env.local_task.params["number"]
    assert "Dashboard" in belief.track("visited") and "Order #" in belief.track("visited")
    assert f"Order #{number}" in belief.track("values")  # seen on an earlier page
    assert number in belief.track("objective")
    assert "Orders placed" in belief.track("orders placed") and "No page seen" in belief.track("zebra crossing")
    assert belief.render().startswith("CURRENT PAGE: ") and "TRAIL: Dashboard" in belief.render()
