"""recall [query]: routing, family scope, determinism, frozen snapshots, latency at full banks."""

import pickle
import random
import time

import numpy as np
import pytest

from evoharness_rl.experience.bank import ExperienceBank
from evoharness_rl.experience.operations import Operation
from evoharness_rl.experience.retrieval import search_subject, tokenize

TWO = ("cool", "heat")


def make_bank():
    bank = ExperienceBank()
    bank.update_index = 1
    bank.apply([
        Operation("add", category="search", subject="kettle", principle="Where to find kettle: stoveburner first, then countertop"),
        Operation("add", category="search", subject="mug", principle="Where to find mug: cabinet first, then countertop"),
        Operation("add", category="search", subject="kettle lid", principle="Where to find kettle lid: drawer first"),
        Operation("add", category="task:cool", family="cool", principle="Procedure: take OBJ > cool OBJ with fridge > move OBJ"),
        Operation("add", category="task:heat", family="heat", principle="Procedure: take OBJ > heat OBJ with microwave > move OBJ"),
        Operation("add", category="mistakes", family="cool", principle="putting the object inside the fridge does not cool it",
                  how_to_avoid="hold it and use cool OBJ with fridge"),
        Operation("add", category="mistakes", principle="repeating an action that had no effect", how_to_avoid="try another action",
                  task_types=TWO),
        Operation("add", category="general", principle="Commit a plan before searching", task_types=TWO),
    ], "test")
    return bank


@pytest.mark.parametrize("query, subject", [
    ("where to find kettle", "kettle"), ("Where is the kettle 1?", "kettle"), ("where can I find a Mug", "mug"),
    ("locate the soapbars", "soapbars"), ("find kettle", "kettle"), ("how to do cool task", None), ("kettle", None),
])
def test_search_queries_are_recognised(query, subject):
    assert search_subject(query) == subject


def test_where_to_find_routes_to_search_priorities_exact_subject_first():
    snap = make_bank().snapshot()
    text, ids = snap.recall("where to find the kettle?", "cool", 3)
    assert ids == ["srch-001", "srch-003"]  # the kettle entry, then "kettle lid" (a partial match)
    assert text.splitlines()[0] == "[srch-001] Where to find kettle: stoveburner first, then countertop"
    assert snap.recall("where are the kettles", "cool", 3)[1][0] == "srch-001"  # plural meets singular
    assert snap.recall("where is a toaster", "cool", 3) == ("No search priority stored for 'toaster'.", [])


def test_family_scope_general_and_own_entries_only():
    snap = make_bank().snapshot()
    _, ids = snap.recall("how to do the task procedure with fridge or microwave", "cool", 8)
    assert "task-001" in ids and "task-002" not in ids
    _, ids = snap.recall("mistakes to avoid", "cool", 3)
    assert set(ids) == {"err-001", "err-002"}
    _, ids = snap.recall("mistakes to avoid", "heat", 3)
    assert ids == ["err-002"]  # the cool-only mistake is invisible to heat episodes


def test_nothing_matches_says_so_and_k_limits_results():
    snap = make_bank().snapshot()
    assert snap.recall("zebra crossing", "cool", 3) == ("No stored experience matches 'zebra crossing'.", [])
    assert len(snap.recall("kettle mug fridge microwave plan", "cool", 2)[1]) == 2
    assert ExperienceBank().snapshot().recall("anything", "cool", 3)[1] == []


def test_same_query_same_answer_and_snapshot_is_frozen_and_picklable():
    snap = make_bank().snapshot()
    queries = ["where is the mug", "mistakes to avoid", "plan", "how to do cool task"]
    answers = [snap.recall(q, "cool", 3) for q in queries]
    clone = pickle.loads(pickle.dumps(snap))
    assert [clone.recall(q, "cool", 3) for q in queries] == answers
    assert clone.content_hash == snap.content_hash
    with pytest.raises(AttributeError, match="read-only"):
        snap.entries = ()


def test_tokenize_drops_stopwords_numbers_and_stems_both_sides():
    assert tokenize("Where are the Kettles 2 and the glasses?") == ["kettl", "glass"]
    assert tokenize("searches searching") == tokenize("search search") and tokenize("mistakes") == tokenize("mistake")


def full_bank(capacity=80, families=6):
    """Every category at capacity: 80 general, 80 mistakes, 80 search, 80 per task family."""
    rng = random.Random(0)
    words = [f"w{i}" for i in range(400)] + "kettle mug fridge cabinet heat cool clean take move open".split()
    bank = ExperienceBank(capacity)
    bank.update_index = 1
    fams = [f"family_{i}" for i in range(families)]
    ops = []
    for i in range(capacity):
        text = lambda: " ".join(rng.choice(words) for _ in range(14))  # noqa: E731
        ops.append(Operation("add", category="general", principle=text(), task_types=tuple(fams[:2])))
        ops.append(Operation("add", category="mistakes", principle=text(), how_to_avoid=text(), task_types=tuple(fams[:2])))
        ops.append(Operation("add", category="search", subject=f"object{i}", principle=f"Where to find object{i}: " + text()))
        ops += [Operation("add", category=f"task:{f}", family=f, principle=text()) for f in fams]
    result = bank.apply(ops, "bench")
    assert result.counts["add"] == capacity * (3 + families)
    return bank, words


def test_recall_latency_at_full_banks_p99_under_2ms():
    bank, words = full_bank()
    snap = bank.snapshot()
    rng = random.Random(1)
    queries = [" ".join(rng.choice(words) for _ in range(4)) for _ in range(300)]
    queries += [f"where to find object{rng.randrange(80)}" for _ in range(100)]
    wall, cpu = [], []
    for q in queries:
        start, start_cpu = time.perf_counter(), time.thread_time()
        snap.recall(q, "family_3", 3)
        wall.append(time.perf_counter() - start)
        cpu.append(time.thread_time() - start_cpu)
    # CPU time is the cost of recall itself; on this shared 2-core machine the wall-time tail
    # is other processes holding the core (scripts/bench_experience.py reports both).
    cpu_p99, wall_p50 = float(np.percentile(cpu, 99)) * 1e3, float(np.percentile(wall, 50)) * 1e3
    assert cpu_p99 <= 2.0, f"recall CPU-time p99 {cpu_p99:.3f} ms > 2 ms"
    assert wall_p50 <= 2.0, f"recall wall-time p50 {wall_p50:.3f} ms > 2 ms"
