"""The README stays a user's guide, and every relative link in it and in docs/ resolves."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").glob("*.md"))
MAX_README_LINES = 250
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^(```|~~~)")


def _prose(path: Path) -> str:
    """The file without its fenced code blocks (commands there are not links)."""
    lines, inside = [], False
    for line in path.read_text(encoding="utf-8").splitlines():
        if FENCE.match(line.strip()):
            inside = not inside
            continue
        if not inside:
            lines.append(line)
    return "\n".join(lines)


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    return {_slug(line.lstrip("#")) for line in _prose(path).splitlines() if line.startswith("#")}


def _relative_links(path: Path) -> list[str]:
    return [target for target in LINK.findall(_prose(path)) if not re.match(r"^[a-z]+:", target)]


def test_readme_is_short():
    lines = README.read_text(encoding="utf-8").splitlines()
    assert len(lines) <= MAX_README_LINES, f"README.md has {len(lines)} lines (at most {MAX_README_LINES})"


def test_readme_has_no_lab_notebook_words():
    text = README.read_text(encoding="utf-8")
    found = re.findall(r"\brun [A-F]\b|Round [0-9]|probe", text)
    assert found == [], f"README.md names experiment history: {found} (it belongs in docs/results.md)"


@pytest.mark.parametrize("path", [README, *DOCS], ids=lambda p: p.relative_to(ROOT).as_posix())
def test_relative_links_resolve(path: Path):
    assert _relative_links(README), "the link pattern finds no links in README.md"
    broken = []
    for target in _relative_links(path):
        file_part, _, anchor = target.partition("#")
        dest = (path.parent / file_part).resolve() if file_part else path
        if not dest.exists():
            broken.append(target)
        elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
            broken.append(target)
    assert broken == [], f"{path.relative_to(ROOT)}: links that do not resolve: {broken}"


@pytest.mark.parametrize("path", [README, *DOCS], ids=lambda p: p.relative_to(ROOT).as_posix())
def test_docs_do_not_point_outside_the_project(path: Path):
    """No relative link climbs out of the checkout: a reader of the docs has only the project."""
    assert not re.search(r"\.\./[a-z]", path.read_text(encoding="utf-8"))


def test_slug_matches_github():
    assert _slug(" Real WebArena (`env.webarena.backend=webarena`)") == "real-webarena-envwebarenabackendwebarena"
    assert _slug("Diagnostics: does RL learn *when*?") == "diagnostics-does-rl-learn-when"
