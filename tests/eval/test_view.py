"""`view`: the static site over real eval runs (fake env, scripted teacher), read back with html.parser."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from fake_eval import run
from site_check import Page, check_site

from evoharness_rl.eval.report import ReportError
from evoharness_rl.eval.view import build_site

HOSTILE = '</pre><script>window.__xss = 1</script><img src="http://example.invalid/x.png"> & "quotes"'


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The same 4 tasks evaluated twice: adaptive and env_only (so they pair side by side)."""
    root = tmp_path_factory.mktemp("runs")
    run(root / "adaptive", limit=4)
    run(root / "env_only", limit=4, **{"harness.mode": "env_only"})
    return root


def test_site_pages_links_and_tables(runs, tmp_path):
    index = build_site([runs / "adaptive", runs / "env_only"], tmp_path / "site")
    site = index.parent
    pages = check_site(site)
    records = sorted((runs / "adaptive" / "trajectories").glob("*.json")) + sorted(
        (runs / "env_only" / "trajectories").glob("*.json"))
    episode_pages = sorted(site.glob("episodes/*/*.html"))
    assert len(episode_pages) == len(records) == 16
    home = pages[index]
    assert {"runs", "all-episodes"} <= set(home.tables)
    assert len(home.rows_by_table["all-episodes"]) == 16
    assert home.svgs >= 1  # the per-family success plot, inline
    assert "Cost" in home.all_text and "Per family, side by side" in home.all_text
    summary = json.loads((runs / "adaptive" / "summary.json").read_text())
    assert f"{summary['cost']['env_steps']}" in home.all_text
    # every episode row links to its page; rows carry the facets the filters use
    rows = home.rows_by_table["all-episodes"]
    assert {r["data-run"] for r in rows} == {"adaptive", "env_only"}
    assert {r["data-outcome"] for r in rows} == {"won"} and {r["data-mode"] for r in rows} == {"adaptive", "env_only"}
    # side by side: each of the 8 (task, seed) pairs was played by both runs
    compare = pages[site / "compare" / "index.html"]
    assert len(compare.rows_by_table["compare"]) == 8 and len(list(site.glob("compare/[0-9]*.html"))) == 8
    # an episode page shows each turn's response, result and the state after it
    record = json.loads(records[0].read_text())
    page = pages[site / "episodes" / "adaptive" / f"{records[0].stem}.html"]
    for turn in record["turns"]:
        assert turn["response"] in page.all_text and turn["observation"] in page.all_text
        assert turn["belief"] in page.all_text
    assert "R_GRPO" in page.all_text  # the reward breakdown


def test_text_from_records_is_escaped(runs, tmp_path):
    copy = tmp_path / "hostile"
    import shutil

    shutil.copytree(runs / "adaptive", copy)
    path = sorted((copy / "trajectories").glob("*.json"))[0]
    record = json.loads(path.read_text())
    record["turns"][0]["response"] = HOSTILE
    record["task_id"] = HOSTILE
    path.write_text(json.dumps(record))
    site = build_site([copy], tmp_path / "site").parent
    pages = check_site(site)  # the <img> inside the text is not an element: nothing would be fetched
    page = pages[site / "episodes" / "hostile" / f"{path.stem}.html"]
    assert page.scripts == 0  # the episode page has no script at all; the one in the text stayed text
    assert HOSTILE in page.all_text
    assert pages[site / "index.html"].scripts == 1  # only the filter script


def test_bad_run_dirs_and_foreign_out_dirs_are_one_line_errors(runs, tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(ReportError, match="empty has no summary.json"):
        build_site([tmp_path / "empty"], tmp_path / "site")
    with pytest.raises(ReportError, match="does not exist"):
        build_site([tmp_path / "missing"], tmp_path / "site")
    with pytest.raises(ReportError, match="holds the run"):
        build_site([runs / "adaptive"], runs)  # would replace the runs themselves
    (tmp_path / "a_file").write_text("x")
    with pytest.raises(ReportError, match="is a file"):
        build_site([runs / "adaptive"], tmp_path / "a_file")
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "thesis.tex").write_text("keep me")
    with pytest.raises(ReportError, match="not a site written by `view`"):
        build_site([runs / "adaptive"], tmp_path / "notes")
    assert (tmp_path / "notes" / "thesis.tex").read_text() == "keep me"
    # a site is replaced whole by the next build (no stale pages survive)
    site = build_site([runs / "adaptive", runs / "env_only"], tmp_path / "site").parent
    assert (site / "episodes" / "env_only").is_dir()
    build_site([runs / "adaptive"], site)
    assert not (site / "episodes" / "env_only").exists() and not (tmp_path / "site.tmp").exists()


def test_cli_view_writes_the_site_and_names_a_bad_run_in_one_line(runs, tmp_path):
    site = tmp_path / "site"
    done = subprocess.run([sys.executable, "-m", "evoharness_rl", "view", f"runs=[{runs / 'adaptive'}]",
                           f"out_dir={site}"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "site:" in done.stdout and (site / "index.html").exists() and (site / "config.yaml").exists()
    check_site(site)
    bad = subprocess.run([sys.executable, "-m", "evoharness_rl", "view", f"runs=[{tmp_path}]",
                          f"out_dir={tmp_path / 'other'}"], capture_output=True, text=True, timeout=300)
    assert bad.returncode == 1 and "Traceback" not in bad.stderr
    assert bad.stderr.strip().count("\n") == 0 and "has no summary.json" in bad.stderr


def test_page_parser_sees_rows_and_links(tmp_path):
    (tmp_path / "a.html").write_text('<table id="t"><tbody><tr data-x="1"><td><a href="b.html">b</a></td></tr>'
                                     '</tbody></table>')
    page = Page(tmp_path / "a.html")
    assert page.rows_by_table == {"t": [{"data-x": "1"}]} and page.links == ["b.html"]


def test_cli_view_serve_answers_on_loopback_and_stops_on_ctrl_c(runs, tmp_path):
    import re
    import signal
    import urllib.request

    site = tmp_path / "site"
    # Ctrl-C as in a terminal: SIGINT at its default, whatever this test process inherited (a shell starts
    # background jobs with SIGINT ignored, and an ignored signal stays ignored across exec)
    proc = subprocess.Popen([sys.executable, "-m", "evoharness_rl", "view", f"runs=[{runs / 'adaptive'}]",
                             f"out_dir={site}", "serve=true", "port=0"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        line = proc.stdout.readline()
        url = re.search(r"http://127\.0\.0\.1:(\d+)/", line)
        assert url, line + proc.stderr.read() if proc.poll() is not None else line
        with urllib.request.urlopen(url.group(0), timeout=60) as response:
            assert response.read().decode() == (site / "index.html").read_text()
        episode = sorted(site.glob("episodes/*/*.html"))[0].relative_to(site).as_posix()
        with urllib.request.urlopen(url.group(0) + episode, timeout=60) as response:
            assert response.status == 200 and response.read()
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=120)  # reads both pipes: a full pipe cannot block the exit
        assert proc.returncode == 0, err[-2000:]  # 120 s: a hang guard, not a speed test
    finally:
        proc.kill()
        proc.wait()


def test_serve_on_a_taken_port_is_a_one_line_error(runs, tmp_path):
    import socket

    from evoharness_rl.errors import UserError
    from evoharness_rl.eval.view import serve_site

    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    try:
        with pytest.raises(UserError, match=r"cannot serve the site on 127\.0\.0\.1:\d+ .*port=0") as err:
            serve_site(tmp_path, taken.getsockname()[1])
        assert "\n" not in str(err.value)
    finally:
        taken.close()
