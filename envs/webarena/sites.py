"""The local sites: server-rendered HTML over the seeded SQLite data, behind one loopback server.

    with SiteServer(db_path) as server:       # a free port on 127.0.0.1, health-checked on start
        server.proxy                          # "http://127.0.0.1:<port>": the browser context's proxy
        SITES["shop"].url("/product/KIT-1007")   # "http://shop.test/product/KIT-1007"

The browser reaches every site through the server as its HTTP proxy, so the sites have
stable addresses (`http://shop.test`, `http://admin.test`, `http://forum.test`) whatever
port the server got, observations are identical across processes and runs, and a request
for any other host is answered by the server with a "blocked" page (the browser never
leaves the configured sites). The server runs in a daemon thread of the process that owns
the environment: it cannot outlive it.

Sites (real HTML: links, GET forms with text boxes, radio buttons and submit buttons,
tables, pagination; no JavaScript needed):
- shop  "OneStop Market": home with search and categories, category pages (sortable,
  paginated), search results, product pages (price, SKU, rating, reviews, stock);
- admin "Store Admin": dashboard, orders (search by number, status filter, paginated),
  order pages, customers and customer pages, products with stock, and an orders report
  over a date range and status;
- forum "Postmill": forums, forum pages (top/new, paginated), posts with comments, user
  profiles (karma), post search.
"""

from __future__ import annotations

import html
import http.client
import sqlite3
import threading
import urllib.parse
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Callable, Optional

from evoharness_rl.envs.webarena.data import STATUSES, open_db

PAGE_SIZE = {"category": 6, "search": 8, "orders": 10, "customers": 10, "products": 10, "forum": 8}
HEALTH_PATH = "/healthz"


@dataclass(frozen=True)
class Site:
    key: str  # shop | admin | forum (the task family)
    host: str
    title: str

    @property
    def base(self) -> str:
        return f"http://{self.host}"

    def url(self, path: str = "/") -> str:
        return self.base + path


SITES = {
    "shop": Site("shop", "shop.test", "OneStop Market"),
    "admin": Site("admin", "admin.test", "Store Admin"),
    "forum": Site("forum", "forum.test", "Postmill"),
}
HOSTS = {site.host: site for site in SITES.values()}


def money(cents: int) -> str:
    return f"${cents // 100:,}.{cents % 100:02d}"


def slug(text: str) -> str:
    return "-".join(text.lower().split())


# ------------------------------------------------------------------------------ html

E = html.escape


def link(href: str, text: str) -> str:
    return f'<a href="{E(href)}">{E(text)}</a>'


def table(headers: list[str], rows: list[list[str]], caption: str = "") -> str:
    head = "".join(f"<th>{E(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{cell}</td>" for cell in row) + "</tr>" for row in rows)
    cap = f"<caption>{E(caption)}</caption>" if caption else ""
    return f"<table>{cap}<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def search_form(action: str, label: str, value: str = "", name: str = "q", extra: str = "") -> str:
    return (f'<form action="{E(action)}" method="get" role="search">'
            f'<label>{E(label)} <input type="text" name="{name}" value="{E(value)}"></label>{extra}'
            f'<button type="submit">Search</button></form>')


def pager(path: str, query: dict, page: int, total: int, size: int) -> str:
    pages = max(1, -(-total // size))
    parts = [f"<p>Page {page} of {pages}</p>"]
    if page > 1:
        parts.append(link(f"{path}?{urllib.parse.urlencode({**query, 'page': page - 1})}", "Previous page"))
    if page < pages:
        parts.append(link(f"{path}?{urllib.parse.urlencode({**query, 'page': page + 1})}", "Next page"))
    return f'<nav aria-label="Pagination">{" ".join(parts)}</nav>'


def document(site: Site, title: str, nav: str, body: str) -> str:
    return (f"<!doctype html><html lang=en><head><meta charset=utf-8><title>{E(title)} | {E(site.title)}</title>"
            "<style>body{font-family:sans-serif;max-width:60em;margin:1em auto}td,th{padding:2px 8px;"
            "text-align:left}nav a{margin-right:1em}</style></head>"
            f"<body><header><nav aria-label=\"Main\">{nav}</nav></header><main>{body}</main></body></html>")


class NotFound(Exception):
    pass


def _page(query: dict) -> int:
    try:
        return max(1, int(query.get("page", "1")))
    except ValueError:
        return 1


# ------------------------------------------------------------------------------ shop


def shop_page(db: sqlite3.Connection, path: str, query: dict) -> tuple[str, str]:
    site = SITES["shop"]
    if path == "/":
        cats = db.execute("SELECT category, COUNT(*) n FROM products GROUP BY category ORDER BY category").fetchall()
        items = "".join(f"<li>{link('/category/' + slug(c['category']), c['category'])} ({c['n']} products)</li>"
                        for c in cats)
        return "Home", f"<h1>{E(site.title)}</h1><h2>Categories</h2><ul>{items}</ul>"
    if path.startswith("/category/"):
        name = next((c for (c,) in db.execute("SELECT DISTINCT category FROM products")
                     if slug(c) == path.split("/", 2)[2]), None)
        if name is None:
            raise NotFound(path)
        sort = query.get("sort", "name")
        order = {"price_asc": "price_cents, name", "price_desc": "price_cents DESC, name"}.get(sort, "name")
        rows = db.execute(f"SELECT * FROM products WHERE category=? ORDER BY {order}", (name,)).fetchall()
        page, size = _page(query), PAGE_SIZE["category"]
        shown = rows[(page - 1) * size: page * size]
        sorts = " ".join(link(f"{path}?sort={key}", text) for key, text in
                         (("name", "Sort by name"), ("price_asc", "Sort by price: low to high"),
                          ("price_desc", "Sort by price: high to low")))
        body = (f"<h1>{E(name)}</h1><p>{len(rows)} products</p><p>{sorts}</p>"
                + table(["Product", "Price", "Rating"],
                        [[link(f"/product/{r['sku']}", r["name"]), money(r["price_cents"]), f"{r['rating']:.1f}"]
                         for r in shown])
                + pager(path, {"sort": sort}, page, len(rows), size))
        return name, body
    if path == "/search":
        q = query.get("q", "").strip()
        words = [w for w in q.lower().split() if w]
        rows = [r for r in db.execute("SELECT * FROM products ORDER BY name")
                if words and all(w in r["name"].lower() for w in words)]
        page, size = _page(query), PAGE_SIZE["search"]
        items = "".join(f"<li>{link('/product/' + r['sku'], r['name'])} {money(r['price_cents'])}</li>"
                        for r in rows[(page - 1) * size: page * size])
        body = (f"<h1>Search results for '{E(q)}'</h1><p>{len(rows)} products found</p><ul>{items}</ul>"
                + pager(path, {"q": q}, page, len(rows), size))
        return f"Search {q}", body
    if path.startswith("/product/"):
        r = db.execute("SELECT * FROM products WHERE sku=?", (path.split("/", 2)[2],)).fetchone()
        if r is None:
            raise NotFound(path)
        stock = f"In stock ({r['stock']} left)" if r["stock"] else "Out of stock"
        body = (f"<p>{link('/', 'Home')} &gt; {link('/category/' + slug(r['category']), r['category'])}</p>"
                f"<h1>{E(r['name'])}</h1><ul><li>Price: {money(r['price_cents'])}</li><li>SKU: {E(r['sku'])}</li>"
                f"<li>Rating: {r['rating']:.1f} out of 5</li><li>Reviews: {r['reviews']}</li>"
                f"<li>Availability: {stock}</li></ul><p>{E(r['description'])}</p>")
        return r["name"], body
    raise NotFound(path)


# ------------------------------------------------------------------------------ admin


def admin_page(db: sqlite3.Connection, path: str, query: dict) -> tuple[str, str]:
    if path == "/":
        n = db.execute("SELECT COUNT(*) FROM orders").fetchone()[0]
        latest = db.execute("SELECT o.*, c.name FROM orders o JOIN customers c ON c.id=o.customer_id "
                            "ORDER BY placed DESC, number LIMIT 5").fetchall()
        body = (f"<h1>Dashboard</h1><p>Orders this year: {n}</p>"
                + table(["Order", "Date", "Customer", "Status"],
                        [[link('/order/' + o['number'], o['number']), o["placed"], E(o["name"]),
                          o["status"].title()] for o in latest], caption="Latest orders"))
        return "Dashboard", body
    if path == "/orders":
        q, status = query.get("q", "").strip(), query.get("status", "")
        sql, args = ("SELECT o.*, c.name FROM orders o JOIN customers c ON c.id=o.customer_id WHERE 1=1", [])
        if q:
            sql, args = sql + " AND o.number LIKE ?", args + [f"%{q.lstrip('#')}%"]
        if status in STATUSES:
            sql, args = sql + " AND o.status=?", args + [status]
        rows = db.execute(sql + " ORDER BY o.placed, o.number", args).fetchall()
        page, size = _page(query), PAGE_SIZE["orders"]
        filters = " ".join(link(f"/orders?{urllib.parse.urlencode({'status': s, 'q': q})}", s.title() if s else "All")
                           for s in ("",) + STATUSES)
        body = (f"<h1>Orders</h1>{search_form('/orders', 'Order number', q, extra=_hidden('status', status))}"
                f"<p>Status: {filters}</p><p>{len(rows)} orders found</p>"
                + table(["Order", "Date", "Customer", "Status", "Total"],
                        [[link('/order/' + o['number'], o['number']), o["placed"], E(o["name"]), o["status"].title(),
                          money(o["total_cents"])] for o in rows[(page - 1) * size: page * size]])
                + pager(path, {"q": q, "status": status}, page, len(rows), size))
        return "Orders", body
    if path.startswith("/order/"):
        o = db.execute("SELECT o.*, c.name, c.id cid FROM orders o JOIN customers c ON c.id=o.customer_id "
                       "WHERE number=?", (path.split("/", 2)[2],)).fetchone()
        if o is None:
            raise NotFound(path)
        items = db.execute("SELECT p.name, p.sku, i.qty, i.price_cents FROM order_items i JOIN products p "
                           "ON p.id=i.product_id WHERE order_id=? ORDER BY p.name", (o["id"],)).fetchall()
        body = (f"<h1>Order #{o['number']}</h1><ul><li>Placed: {o['placed']}</li><li>Status: {o['status'].title()}"
                f"</li><li>Customer: {link('/customer/' + str(o['cid']), o['name'])}</li></ul>"
                + table(["Product", "SKU", "Qty", "Price"], [[E(i["name"]), i["sku"], str(i["qty"]),
                                                             money(i["price_cents"])] for i in items], "Items")
                + f"<p>Grand Total: {money(o['total_cents'])}</p>")
        return f"Order #{o['number']}", body
    if path == "/customers":
        q = query.get("q", "").strip()
        rows = db.execute("SELECT c.*, COUNT(o.id) n FROM customers c LEFT JOIN orders o ON o.customer_id=c.id "
                          "WHERE c.name LIKE ? GROUP BY c.id ORDER BY c.name", (f"%{q}%",)).fetchall()
        page, size = _page(query), PAGE_SIZE["customers"]
        body = (f"<h1>Customers</h1>{search_form('/customers', 'Customer name', q)}<p>{len(rows)} customers found</p>"
                + table(["Name", "Email", "City", "Orders"],
                        [[link(f"/customer/{c['id']}", c["name"]), E(c["email"]), c["city"], str(c["n"])]
                         for c in rows[(page - 1) * size: page * size]])
                + pager(path, {"q": q}, page, len(rows), size))
        return "Customers", body
    if path.startswith("/customer/"):
        try:
            c = db.execute("SELECT * FROM customers WHERE id=?", (int(path.split("/", 2)[2]),)).fetchone()
        except ValueError:
            c = None
        if c is None:
            raise NotFound(path)
        orders = db.execute("SELECT * FROM orders WHERE customer_id=? ORDER BY placed, number", (c["id"],)).fetchall()
        body = (f"<h1>{E(c['name'])}</h1><ul><li>Email: {E(c['email'])}</li><li>City: {c['city']}</li>"
                f"<li>Customer since: {c['joined']}</li><li>Orders placed: {len(orders)}</li>"
                f"<li>Lifetime sales: {money(sum(o['total_cents'] for o in orders))}</li></ul>"
                + table(["Order", "Date", "Status", "Total"],
                        [[link('/order/' + o['number'], o['number']), o["placed"], o["status"].title(),
                          money(o["total_cents"])] for o in orders], "Orders"))
        return c["name"], body
    if path == "/products":
        q = query.get("q", "").strip()
        rows = db.execute("SELECT * FROM products WHERE name LIKE ? OR sku LIKE ? ORDER BY sku",
                          (f"%{q}%", f"%{q}%")).fetchall()
        page, size = _page(query), PAGE_SIZE["products"]
        body = (f"<h1>Products</h1>{search_form('/products', 'Name or SKU', q)}<p>{len(rows)} products found</p>"
                + table(["SKU", "Name", "Price", "Quantity"],
                        [[r["sku"], E(r["name"]), money(r["price_cents"]), str(r["stock"])]
                         for r in rows[(page - 1) * size: page * size]])
                + pager(path, {"q": q}, page, len(rows), size))
        return "Products", body
    if path == "/reports":
        return "Orders Report", _report(db, query)
    raise NotFound(path)


def _hidden(name: str, value: str) -> str:
    return f'<input type="hidden" name="{name}" value="{E(value)}">' if value else ""


def _report(db: sqlite3.Connection, query: dict) -> str:
    start, end, status = query.get("from", "").strip(), query.get("to", "").strip(), query.get("status", "any")
    radios = "".join(f'<label><input type="radio" name="status" value="{s}"{" checked" if s == status else ""}>'
                     f'{s.title()}</label> ' for s in ("any",) + STATUSES)
    form = ('<form action="/reports" method="get"><fieldset><legend>Report filter</legend>'
            f'<label>From <input type="text" name="from" value="{E(start)}" placeholder="YYYY-MM-DD"></label> '
            f'<label>To <input type="text" name="to" value="{E(end)}" placeholder="YYYY-MM-DD"></label>'
            f'<p>Status: {radios}</p><button type="submit">Show Report</button></fieldset></form>')
    body = f"<h1>Orders Report</h1>{form}"
    if not (start or end):
        return body + "<p>Choose a date range and click Show Report.</p>"
    if not (_is_date(start) and _is_date(end)) or start > end:
        return body + '<p role="alert">Error: enter both dates as YYYY-MM-DD, From not after To.</p>'
    sql, args = "SELECT substr(placed,1,7) month, COUNT(*) n, SUM(total_cents) s FROM orders WHERE placed BETWEEN ? AND ?", [start, end]
    if status in STATUSES:
        sql, args = sql + " AND status=?", args + [status]
    rows = db.execute(sql + " GROUP BY month ORDER BY month", args).fetchall()
    total, sales = sum(r["n"] for r in rows), sum(r["s"] for r in rows)
    label = "all statuses" if status not in STATUSES else status
    return (body + table(["Month", "Orders", "Sales"], [[r["month"], str(r["n"]), money(r["s"])] for r in rows],
                         f"Orders from {start} to {end} ({label})")
            + f"<p>Total orders: {total}</p><p>Total sales: {money(sales)}</p>")


def _is_date(text: str) -> bool:
    import datetime

    try:
        datetime.date.fromisoformat(text)
        return len(text) == 10
    except ValueError:
        return False


# ------------------------------------------------------------------------------ forum


def forum_page(db: sqlite3.Connection, path: str, query: dict) -> tuple[str, str]:
    post_sql = ("SELECT p.*, u.username, f.name forum, (SELECT COUNT(*) FROM comments c WHERE c.post_id=p.id) nc "
                "FROM posts p JOIN users u ON u.id=p.user_id JOIN forums f ON f.id=p.forum_id")

    def post_item(p) -> str:
        return (f"<li>{link('/post/' + str(p['id']), p['title'])} in f/{p['forum']} by "
                f"{link('/user/' + p['username'], p['username'])}, score {p['score']}, "
                f"{link('/post/' + str(p['id']), str(p['nc']) + ' comments')}</li>")

    if path == "/":
        rows = db.execute("SELECT f.*, COUNT(p.id) n FROM forums f LEFT JOIN posts p ON p.forum_id=f.id "
                          "GROUP BY f.id ORDER BY f.name").fetchall()
        items = "".join(f"<li>{link('/f/' + f['name'], 'f/' + f['name'])} {f['n']} posts. {E(f['description'])}</li>"
                        for f in rows)
        return "Forums", f"<h1>Forums</h1><ul>{items}</ul>"
    if path.startswith("/f/"):
        name = path.split("/", 2)[2]
        if db.execute("SELECT 1 FROM forums WHERE name=?", (name,)).fetchone() is None:
            raise NotFound(path)
        sort = "new" if query.get("sort") == "new" else "top"
        order = "p.id DESC" if sort == "new" else "p.score DESC, p.id"
        rows = db.execute(f"{post_sql} WHERE f.name=? ORDER BY {order}", (name,)).fetchall()
        page, size = _page(query), PAGE_SIZE["forum"]
        sorts = f"Sort by: {link(path + '?sort=top', 'Top')} {link(path + '?sort=new', 'New')}"
        body = (f"<h1>f/{E(name)}</h1><p>{len(rows)} posts, sorted by {sort}</p><p>{sorts}</p>"
                f"<ol>{''.join(post_item(p) for p in rows[(page - 1) * size: page * size])}</ol>"
                + pager(path, {"sort": sort}, page, len(rows), size))
        return f"f/{name}", body
    if path.startswith("/post/"):
        try:
            p = db.execute(f"{post_sql} WHERE p.id=?", (int(path.split("/", 2)[2]),)).fetchone()
        except ValueError:
            p = None
        if p is None:
            raise NotFound(path)
        comments = db.execute("SELECT c.body, u.username FROM comments c JOIN users u ON u.id=c.user_id "
                              "WHERE post_id=? ORDER BY c.id", (p["id"],)).fetchall()
        items = "".join(f"<li>{link('/user/' + c['username'], c['username'])}: {E(c['body'])}</li>" for c in comments)
        body = (f"<h1>{E(p['title'])}</h1><p>Submitted by {link('/user/' + p['username'], p['username'])} in "
                f"{link('/f/' + p['forum'], 'f/' + p['forum'])}</p><p>Score: {p['score']}</p><p>{E(p['body'])}</p>"
                f"<h2>{len(comments)} comments</h2><ul>{items}</ul>")
        return p["title"], body
    if path.startswith("/user/"):
        u = db.execute("SELECT * FROM users WHERE username=?", (path.split("/", 2)[2],)).fetchone()
        if u is None:
            raise NotFound(path)
        posts = db.execute(f"{post_sql} WHERE p.user_id=? ORDER BY p.id", (u["id"],)).fetchall()
        body = (f"<h1>{E(u['username'])}</h1><ul><li>Karma: {u['karma']}</li><li>Joined: {u['joined']}</li>"
                f"<li>Posts: {len(posts)}</li></ul><h2>Posts</h2><ul>{''.join(post_item(p) for p in posts)}</ul>")
        return u["username"], body
    if path == "/search":
        q = query.get("q", "").strip()
        words = [w for w in q.lower().split() if w]
        rows = [p for p in db.execute(f"{post_sql} ORDER BY p.id") if words and all(w in p["title"].lower() for w in words)]
        page, size = _page(query), PAGE_SIZE["search"]
        body = (f"<h1>Search results for '{E(q)}'</h1><p>{len(rows)} posts found</p>"
                f"<ul>{''.join(post_item(p) for p in rows[(page - 1) * size: page * size])}</ul>"
                + pager(path, {"q": q}, page, len(rows), size))
        return f"Search {q}", body
    raise NotFound(path)


def _nav(site_key: str, path: str, query: dict) -> str:
    if site_key == "shop":
        return link("/", "Home") + search_form("/search", "Search products", query.get("q", "") if path == "/search" else "")
    if site_key == "admin":
        return " ".join(link(href, text) for href, text in (("/", "Dashboard"), ("/orders", "Orders"),
                                                            ("/customers", "Customers"), ("/products", "Products"),
                                                            ("/reports", "Reports")))
    return link("/", "Forums") + search_form("/search", "Search posts", query.get("q", "") if path == "/search" else "")


RENDERERS: dict[str, Callable[[sqlite3.Connection, str, dict], tuple[str, str]]] = {
    "shop": shop_page, "admin": admin_page, "forum": forum_page}


def render(db: sqlite3.Connection, site_key: str, path: str, query: dict) -> tuple[int, str]:
    """(status, html) of one page of a site."""
    site = SITES[site_key]
    nav = _nav(site_key, path, query)
    try:
        title, body = RENDERERS[site_key](db, path, query)
    except NotFound:
        return 404, document(site, "Not found", nav, f"<h1>Page not found</h1><p>{E(path)} does not exist.</p>")
    return 200, document(site, title, nav, body)


# ------------------------------------------------------------------------------ server


class _Handler(BaseHTTPRequestHandler):
    server: "_Server"
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        parts = urllib.parse.urlsplit(self.path)
        host = (parts.hostname or self.headers.get("Host", "").split(":")[0]).lower()
        path = parts.path or "/"
        if path == HEALTH_PATH and host in ("", "127.0.0.1", *HOSTS):
            return self._send(200, "ok", "text/plain")
        site = HOSTS.get(host)
        if site is None:
            return self._send(403, f"<!doctype html><title>Blocked</title><h1>Blocked</h1><p>{E(host or '?')} is not "
                                   "one of the configured sites.</p>")
        if self.server.delay_s:
            threading.Event().wait(self.server.delay_s)
        if self.server.fail_with is not None:
            return self._send(self.server.fail_with, "<!doctype html><title>Unavailable</title><h1>Service "
                                                     "unavailable</h1>")
        query = {k: v[-1] for k, v in urllib.parse.parse_qs(parts.query, keep_blank_values=True).items()}
        status, text = render(self.server.db, site.key, path, query)
        self._send(status, text)

    def do_CONNECT(self) -> None:  # noqa: N802 - https through the proxy: no configured site uses it
        self.close_connection = True
        self._send(403, "https is not served: the configured sites are plain http", "text/plain")

    def do_POST(self) -> None:  # noqa: N802 - the sites are read-only
        self.close_connection = True
        self._send(405, "the local sites accept GET only", "text/plain")

    do_PUT = do_DELETE = do_PATCH = do_OPTIONS = do_HEAD = do_POST

    def _send(self, status: int, text: str, kind: str = "text/html; charset=utf-8") -> None:
        data = text.encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Cache-Control", "no-store")
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args) -> None:  # quiet
        pass


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address) -> None:  # a browser that hung up mid-answer: not our error
        pass

    db: sqlite3.Connection
    fail_with: Optional[int] = None  # tests: answer every site request with this status
    delay_s: float = 0.0  # tests: answer every site request this late (a page that does not load)


class SiteServer:
    """The three sites on one free loopback port, serving as the browser's proxy (see module docstring)."""

    def __init__(self, db_path: Path):
        self.db_path = Path(db_path)
        self._server: Optional[_Server] = None
        self._thread: Optional[threading.Thread] = None

    def start(self, timeout_s: float = 10.0) -> "SiteServer":
        if self._server is not None:
            return self
        server = _Server(("127.0.0.1", 0), _Handler)
        server.db = open_db(self.db_path)
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.2},
                                        name="webarena-sites", daemon=True)
        self._thread.start()
        self.health_check(timeout_s)
        return self

    @property
    def port(self) -> int:
        if self._server is None:
            raise RuntimeError("the site server is not running")
        return self._server.server_address[1]

    @property
    def proxy(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def running(self) -> bool:
        return self._server is not None

    def health_check(self, timeout_s: float = 5.0) -> None:
        """GET /healthz of every site through the server; raises RuntimeError if one does not answer."""
        for site in SITES.values():
            conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout_s)
            try:
                conn.request("GET", site.url(HEALTH_PATH))
                response = conn.getresponse()
                ok = response.status == 200 and response.read() == b"ok"
            except OSError as err:
                raise RuntimeError(f"site server on port {self.port} did not answer for {site.host}: {err}") from err
            finally:
                conn.close()
            if not ok:
                raise RuntimeError(f"site server on port {self.port}: health check of {site.host} failed")

    def fail_requests(self, status: Optional[int]) -> None:
        """Tests: make every site answer `status` (e.g. 503), or serve normally again (None)."""
        if self._server is not None:
            self._server.fail_with = status

    def delay_requests(self, seconds: float) -> None:
        """Tests: answer every site request `seconds` late (0: at once)."""
        if self._server is not None:
            self._server.delay_s = seconds

    def stop(self) -> None:
        server, self._server = self._server, None
        if server is None:
            return
        server.shutdown()
        server.server_close()
        server.db.close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self) -> "SiteServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
