"""The local sites' seeded data: one SQLite file, deterministic given the seed.

    path = prepare(env_cfg)          # data_dir/webarena/sites-seed<k>.sqlite (built once, then reused)
    db = open_db(path)               # read-only connection

Three sites share the file (each reads only its own tables):
- shop   (a store front):  categories, products (SKU, price, rating, reviews, stock);
- admin  (the store's back office): customers, orders and their items, over the same products;
- forum  (a discussion forum): forums, users (karma), posts (score), comments.

Names are composed from fixed word lists with one `random.Random(seed)`, so the same seed
gives the same file byte for byte (rows are inserted in a fixed order; no timestamps).
"""

from __future__ import annotations

import os
import random
import sqlite3
from datetime import date, timedelta
from pathlib import Path
from typing import Any

SCHEMA_VERSION = 1
CATEGORIES = ("Kitchen", "Garden", "Office", "Outdoor", "Electronics", "Pet Supplies")
_ADJ = ("Classic", "Compact", "Deluxe", "Eco", "Essential", "Heavy Duty", "Lightweight", "Modern", "Premium",
        "Rustic", "Smart", "Solid", "Ultra", "Vintage", "Travel", "Pro")
_NOUNS = {
    "Kitchen": ("Kettle", "Skillet", "Cutting Board", "Knife Set", "Blender", "Mixing Bowl", "Toaster", "Colander"),
    "Garden": ("Hose", "Trowel", "Planter", "Pruner", "Watering Can", "Rake", "Seed Tray", "Wheelbarrow"),
    "Office": ("Desk Lamp", "Stapler", "Notebook", "Monitor Stand", "Pen Holder", "Filing Box", "Chair Mat",
               "Whiteboard"),
    "Outdoor": ("Tent", "Sleeping Bag", "Lantern", "Camp Stove", "Backpack", "Hammock", "Cooler", "Trekking Pole"),
    "Electronics": ("Headphones", "Charger", "Speaker", "Webcam", "Keyboard", "Mouse", "Power Bank", "Router"),
    "Pet Supplies": ("Dog Bed", "Cat Tree", "Leash", "Pet Bowl", "Litter Box", "Chew Toy", "Grooming Brush",
                     "Pet Carrier"),
}
_FIRST = ("Alice", "Bruno", "Chen", "Dana", "Emeka", "Fatima", "Grace", "Hiro", "Ines", "Jonas", "Kara", "Liam",
          "Maya", "Nikos", "Olga", "Pavel", "Quinn", "Rosa", "Sami", "Tara", "Umar", "Vera", "Wen", "Yara")
_LAST = ("Adams", "Baker", "Costa", "Diaz", "Evans", "Fischer", "Garcia", "Horvat", "Ito", "Jensen", "Kowalski",
         "Lopez", "Moreau", "Novak", "Okafor", "Petrov", "Rossi", "Silva", "Tanaka", "Weber")
_CITIES = ("Austin", "Boston", "Denver", "Portland", "Seattle", "Chicago", "Atlanta", "Phoenix")
STATUSES = ("complete", "pending", "processing", "canceled")
FORUMS = (("books", "Reading lists and reviews"), ("gardening", "Plants, soil and seasons"),
          ("cooking", "Recipes and kitchen tips"), ("hiking", "Trails and gear"),
          ("photography", "Cameras, light and composition"), ("music", "Instruments and recordings"))
_TOPIC_WORDS = {
    "books": ("novel", "audiobook", "library", "poetry collection", "book club", "mystery series"),
    "gardening": ("tomato seedlings", "compost bin", "raised bed", "orchid", "lawn", "herb garden"),
    "cooking": ("sourdough", "cast iron pan", "curry", "knife skills", "meal prep", "pasta dough"),
    "hiking": ("day pack", "trail map", "boots", "summit", "river crossing", "campsite"),
    "photography": ("prime lens", "tripod", "night sky", "portrait light", "film camera", "editing workflow"),
    "music": ("guitar strings", "home studio", "piano practice", "vinyl", "drum kit", "songwriting"),
}
_TITLE_FORMS = ("Advice on my {t}?", "Finally finished my {t}", "Best {t} for beginners", "My {t} story",
                "Question about the {t}", "Show and tell: {t}", "Is a {t} worth it?", "Ten tips for your {t}")
_USER_A = ("quiet", "brave", "lucky", "swift", "clever", "sunny", "misty", "rapid", "gentle", "bold")
_USER_B = ("otter", "falcon", "maple", "river", "comet", "badger", "cedar", "heron", "pixel", "tundra")
YEAR = 2023


def database_path(env_cfg: Any) -> Path:
    root = Path(env_cfg.data_path) if env_cfg.data_path else Path(env_cfg.data_dir) / "webarena"
    return root / f"sites-seed{env_cfg.webarena.generator_seed}-v{SCHEMA_VERSION}.sqlite"


def prepare(env_cfg: Any) -> Path:
    """Build the sites' database under data_dir (once; an existing file is reused)."""
    path = database_path(env_cfg)
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.unlink(missing_ok=True)
        build_database(tmp, env_cfg.webarena.generator_seed)
        os.replace(tmp, path)  # atomic: parallel workers never read a half-written file
    return path


def open_db(path: Path) -> sqlite3.Connection:
    """A read-only connection (the sites never write: tasks are information seeking and navigation)."""
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, check_same_thread=False)
    db.row_factory = sqlite3.Row
    return db


def build_database(path: Path, seed: int) -> None:
    rng = random.Random(f"webarena-sites:{seed}")
    db = sqlite3.connect(path)
    db.executescript("""
        CREATE TABLE products (id INTEGER PRIMARY KEY, sku TEXT UNIQUE, name TEXT UNIQUE, category TEXT,
                               price_cents INTEGER, rating REAL, reviews INTEGER, stock INTEGER, description TEXT);
        CREATE TABLE customers (id INTEGER PRIMARY KEY, name TEXT UNIQUE, email TEXT, city TEXT, joined TEXT);
        CREATE TABLE orders (id INTEGER PRIMARY KEY, number TEXT UNIQUE, customer_id INTEGER, placed TEXT,
                             status TEXT, total_cents INTEGER);
        CREATE TABLE order_items (order_id INTEGER, product_id INTEGER, qty INTEGER, price_cents INTEGER);
        CREATE TABLE forums (id INTEGER PRIMARY KEY, name TEXT UNIQUE, description TEXT);
        CREATE TABLE users (id INTEGER PRIMARY KEY, username TEXT UNIQUE, karma INTEGER, joined TEXT);
        CREATE TABLE posts (id INTEGER PRIMARY KEY, forum_id INTEGER, user_id INTEGER, title TEXT UNIQUE,
                            score INTEGER, body TEXT);
        CREATE TABLE comments (id INTEGER PRIMARY KEY, post_id INTEGER, user_id INTEGER, body TEXT);
    """)
    # products: every (adjective, noun) pair at most once; 10 per category
    pid = 0
    for category in CATEGORIES:
        pairs = rng.sample([(a, n) for a in _ADJ for n in _NOUNS[category]], 10)
        for adj, noun in pairs:
            pid += 1
            name = f"{adj} {noun}"
            price = rng.randint(5, 240) * 100 + rng.choice((0, 49, 95, 99))
            db.execute("INSERT INTO products VALUES (?,?,?,?,?,?,?,?,?)", (
                pid, f"{category[:3].upper()}-{1000 + pid * 7}", name, category, price,
                round(rng.uniform(2.5, 5.0), 1), rng.randint(0, 180), rng.randint(0, 60),
                f"The {name.lower()} is part of our {category.lower()} range."))
    n_products = pid
    # customers and orders
    names = rng.sample([f"{f} {last}" for f in _FIRST for last in _LAST], 40)
    for cid, name in enumerate(names, 1):
        joined = date(2021, 1, 1) + timedelta(days=rng.randint(0, 700))
        email = name.lower().replace(" ", ".") + "@example.com"
        db.execute("INSERT INTO customers VALUES (?,?,?,?,?)", (cid, name, email, rng.choice(_CITIES),
                                                                joined.isoformat()))
    for oid in range(1, 241):
        placed = date(YEAR, 1, 1) + timedelta(days=rng.randint(0, 364))
        status = rng.choices(STATUSES, weights=(6, 2, 2, 1))[0]
        items = rng.sample(range(1, n_products + 1), rng.randint(1, 3))
        total = 0
        for product in items:
            qty = rng.randint(1, 3)
            price = db.execute("SELECT price_cents FROM products WHERE id=?", (product,)).fetchone()[0]
            total += qty * price
            db.execute("INSERT INTO order_items VALUES (?,?,?,?)", (oid, product, qty, price))
        db.execute("INSERT INTO orders VALUES (?,?,?,?,?,?)", (oid, f"{100000 + oid * 13:06d}",
                                                               rng.randint(1, len(names)), placed.isoformat(),
                                                               status, total))
    # forum
    for fid, (name, description) in enumerate(FORUMS, 1):
        db.execute("INSERT INTO forums VALUES (?,?,?)", (fid, name, description))
    usernames = rng.sample([f"{a}_{b}" for a in _USER_A for b in _USER_B], 30)
    for uid, username in enumerate(usernames, 1):
        joined = date(2019, 1, 1) + timedelta(days=rng.randint(0, 1400))
        db.execute("INSERT INTO users VALUES (?,?,?,?)", (uid, username, rng.randint(1, 5000), joined.isoformat()))
    post_id = 0
    for fid, (forum, _) in enumerate(FORUMS, 1):
        titles = rng.sample([form.format(t=t) for form in _TITLE_FORMS for t in _TOPIC_WORDS[forum]],
                            rng.randint(9, 20))
        for title in titles:
            post_id += 1
            db.execute("INSERT INTO posts VALUES (?,?,?,?,?,?)", (
                post_id, fid, rng.randint(1, len(usernames)), title, rng.randint(-5, 900),
                f"Posted in f/{forum}: {title.lower()} Any thoughts are welcome."))
            for _ in range(rng.randint(0, 14)):
                db.execute("INSERT INTO comments (post_id, user_id, body) VALUES (?,?,?)", (
                    post_id, rng.randint(1, len(usernames)), rng.choice(("Agreed.", "Great post!", "Thanks for sharing.",
                                                                         "I had the same problem.", "Nice work.",
                                                                         "Could you say more?"))))
    db.commit()
    db.close()
