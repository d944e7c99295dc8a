"""Reads a site written by `evoharness-rl view` with html.parser: its links, scripts, tables and text.

A plain module (not a test): the eval and GRPO tests check the sites they build with it.
"""

from __future__ import annotations

from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlparse


class Page(HTMLParser):
    """Links, inline/external resources, tables, svg plots and text of one HTML page."""

    def __init__(self, path: Path):
        super().__init__(convert_charrefs=True)
        self.path = path
        self.links: list[str] = []  # href of <a>
        self.resources: list[str] = []  # src/href of anything the page would load (scripts, styles, images)
        self.scripts = 0  # <script> elements
        self.tables: list[str] = []  # id of every <table> ("" when none)
        self.svgs = 0
        self.rows_by_table: dict[str, list[dict[str, str]]] = {}  # table id -> attributes of its body rows
        self.text: list[str] = []
        self._table: list[str] = []
        self._in_body = False
        self.open_tags: list[str] = []
        self.feed(path.read_text(encoding="utf-8"))
        self.close()

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag not in ("br", "meta", "link", "img", "input", "path", "use", "rect", "line", "circle", "stop",
                       "polyline", "polygon", "ellipse", "image"):
            self.open_tags.append(tag)
        if tag == "a" and "href" in a:
            self.links.append(a["href"])
        if tag in ("script", "img", "iframe", "link", "embed", "object", "source") and (a.get("src") or a.get("href")):
            self.resources.append(a.get("src") or a.get("href"))
        if tag == "script":
            self.scripts += 1
        if tag == "svg":
            self.svgs += 1
        if tag == "table":
            self.tables.append(a.get("id", ""))
            self._table.append(a.get("id", ""))
            self.rows_by_table.setdefault(a.get("id", ""), [])
        if tag == "tbody":
            self._in_body = True
        if tag == "tr" and self._in_body and self._table:
            self.rows_by_table[self._table[-1]].append({k: v or "" for k, v in attrs})

    def handle_startendtag(self, tag, attrs):
        self.handle_starttag(tag, attrs)
        if self.open_tags and self.open_tags[-1] == tag:
            self.open_tags.pop()

    def handle_endtag(self, tag):
        if tag == "tbody":
            self._in_body = False
        if tag == "table" and self._table:
            self._table.pop()
        if tag in self.open_tags:
            while self.open_tags and self.open_tags.pop() != tag:
                pass

    def handle_data(self, data):
        self.text.append(data)

    @property
    def all_text(self) -> str:
        return "".join(self.text)


def check_site(site: Path) -> dict[Path, Page]:
    """Every page parses, every link resolves to a file of the site, nothing would be fetched from elsewhere.

    Returns the parsed pages by path."""
    pages = {p: Page(p) for p in sorted(site.rglob("*.html"))}
    assert (site / "index.html") in pages
    for path, page in pages.items():
        assert not page.resources, f"{path} loads {page.resources}: the site must be self-contained"
        for link in page.links:
            parsed = urlparse(link)
            assert not parsed.scheme and not parsed.netloc, f"{path} links outside the site: {link}"
            if not parsed.path:
                continue
            target = (path.parent / unquote(parsed.path)).resolve()
            assert target.is_file(), f"{path}: link {link} does not resolve to a file"
            assert site.resolve() in target.parents, f"{path}: link {link} leaves the site"
    return pages
