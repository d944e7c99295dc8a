"""Experience benchmark: recall latency at full banks and consolidation apply time vs bank size.

    python scripts/bench_experience.py [--queries 3000] [--families 6] [--capacity 80]

Full bank = every category at capacity: general, mistakes, search, and one task category
per family (80 x 9 = 720 active entries with the defaults). Prints p50/p99 recall latency
(target: p99 <= 2 ms) as wall time and as this thread's CPU time (on a busy machine the
wall-time tail is mostly the scheduler), snapshot build time, and the time to apply one
consolidation's operations (adds, updates, archives + capacity pruning) as the bank grows.
"""

from __future__ import annotations

import argparse
import random
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from evoharness_rl.experience.bank import ExperienceBank
from evoharness_rl.experience.operations import Operation

OBJECTS = ("apple bread butterknife cup dishsponge egg fork kettle knife ladle lettuce mug pan peppershaker plate pot "
           "potato saltshaker soapbottle spatula spoon tomato winebottle bowl box cellphone creditcard keychain laptop "
           "newspaper pillow remotecontrol statue vase watch alarmclock book cd pen pencil candle cloth soapbar").split()
PLACES = "cabinet countertop diningtable drawer fridge microwave shelf sinkbasin stoveburner desk sidetable dresser sofa bed".split()
VERBS = "take move heat cool clean open close go check track commit recall avoid search find use examine".split()


def sentence(rng: random.Random, n: int = 14) -> str:
    pool = OBJECTS + PLACES + VERBS
    return " ".join(rng.choice(pool) for _ in range(n))


def fill_ops(per_category: int, families: list[str], rng: random.Random, start: int = 0) -> list[Operation]:
    ops = []
    for i in range(start, start + per_category):
        ops.append(Operation("add", category="general", principle=f"{i} " + sentence(rng), task_types=tuple(families[:2])))
        ops.append(Operation("add", category="mistakes", principle=f"{i} " + sentence(rng), how_to_avoid=sentence(rng, 8),
                             task_types=tuple(families[:2])))
        subject = f"{OBJECTS[i % len(OBJECTS)]}{i // len(OBJECTS) or ''}"
        ranked = rng.sample(PLACES, 3)
        ops.append(Operation("add", category="search", subject=subject,
                             principle=f"Where to find {subject}: {ranked[0]} first, then {ranked[1]}, {ranked[2]}"))
        ops += [Operation("add", category=f"task:{f}", family=f, principle=f"{i} " + sentence(rng)) for f in families]
    return ops


def full_bank(capacity: int, families: list[str], per_category: int, seed: int = 0) -> ExperienceBank:
    bank = ExperienceBank(capacity)
    bank.update_index = 1
    bank.apply(fill_ops(per_category, families, random.Random(seed)), "bench")
    return bank


def bench_recall(capacity: int, families: list[str], n_queries: int) -> None:
    bank = full_bank(capacity, families, capacity)
    start = time.perf_counter()
    snapshot = bank.snapshot()
    build_ms = (time.perf_counter() - start) * 1e3
    rng = random.Random(1)
    queries = []
    for i in range(n_queries):
        kind = i % 3
        if kind == 0:
            queries.append(f"where to find {rng.choice(OBJECTS)}")
        elif kind == 1:
            queries.append(f"how to do {rng.choice(families).replace('_', ' ')} task")
        else:
            queries.append(" ".join(rng.choice(OBJECTS + PLACES + VERBS) for _ in range(rng.randint(1, 8))))
    wall, cpu, empty = [], [], 0
    for q in queries:
        family = rng.choice(families)
        t0, c0 = time.perf_counter(), time.thread_time()
        _, ids = snapshot.recall(q, family, 3)
        wall.append(time.perf_counter() - t0)
        cpu.append(time.thread_time() - c0)
        empty += not ids
    wall_ms, cpu_ms = np.array(wall) * 1e3, np.array(cpu) * 1e3
    print(f"recall @ full bank ({len(snapshot)} active entries, {len(families)} families, {n_queries} queries, "
          f"{empty} matched nothing); snapshot build {build_ms:.1f} ms")
    print(f"  wall time: p50 {np.percentile(wall_ms, 50):.3f} ms, p99 {np.percentile(wall_ms, 99):.3f} ms, max {wall_ms.max():.3f} ms")
    print(f"  CPU time (this thread; excludes time other processes hold the core): "
          f"p50 {np.percentile(cpu_ms, 50):.3f} ms, p99 {np.percentile(cpu_ms, 99):.3f} ms")


def bench_apply(capacity: int, families: list[str]) -> None:
    print("consolidation apply time vs bank size (one batch: 20 adds, 20 updates, 10 archives, 5 skips; capacity pruning)")
    print("  active entries | apply ms (median of 5) | save ms | load ms")
    rng = random.Random(2)
    for per_category in (0, 10, 20, 40, 80):
        runs, save_runs, load_runs = [], [], []
        for rep in range(5):
            bank = full_bank(capacity, families, per_category, seed=rep)
            bank.update_index = 2
            active = [e.id for e in bank.active()]
            ops = fill_ops(3, families, rng, start=1000)[:20]
            ops += [Operation("update", id=i, principle=sentence(rng)) for i in rng.sample(active, min(20, len(active)))]
            ops += [Operation("archive", id=i) for i in rng.sample(active, min(10, len(active)))]
            ops += [Operation("skip", reason="redundant")] * 5
            t0 = time.perf_counter()
            bank.apply(ops, "bench")
            runs.append((time.perf_counter() - t0) * 1e3)
            with tempfile.TemporaryDirectory() as tmp:
                path = Path(tmp) / "bank.json"
                t0 = time.perf_counter()
                bank.save(path)
                save_runs.append((time.perf_counter() - t0) * 1e3)
                t0 = time.perf_counter()
                ExperienceBank.load(path)
                load_runs.append((time.perf_counter() - t0) * 1e3)
        size = per_category * (3 + len(families))
        print(f"  {size:14d} | {statistics.median(runs):22.2f} | {statistics.median(save_runs):7.2f} | {statistics.median(load_runs):7.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queries", type=int, default=3000)
    parser.add_argument("--families", type=int, default=6)
    parser.add_argument("--capacity", type=int, default=80)
    args = parser.parse_args()
    families = [f"family_{i}" for i in range(args.families)]
    bench_recall(args.capacity, families, args.queries)
    bench_apply(args.capacity, families)


if __name__ == "__main__":
    main()
