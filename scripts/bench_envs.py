"""Environment throughput through the worker pool, and reset / search latency.

    python scripts/bench_envs.py                       # ALFWorld small + large, WebShop, WebArena
    python scripts/bench_envs.py --envs alfworld --sizes small --episodes 8 --steps 20
    python scripts/bench_envs.py --envs alfworld_fast_path --json F   # the fast path against the engine's own code

ALFWorld (generated games, prepared on first use under --data-dir): env steps/s with 1
and 2 workers on small and large games, each worker hosting several live episodes and
every round stepping all of them (random admissible actions, seeded); reset latency of
one game at a time; every game loaded at once through 2 workers, with the workers' GC
thresholds (`pool.prepare_worker_process`) next to Python's defaults. Target: 2 workers
>= 1.6x one worker on small games.
ALFWorld fast path (`alfworld_fast_path`, envs/alfworld/fast_path.py): one process walks the same seeded
episodes over the generated small games (random admissible commands, one in ten inadmissible, a reset
on the next game when one ends or after 25 steps) with `env.alfworld.fast_path` off and on, alternating
engine / fast twice; each side's step and reset times are summed over both of its rounds. The fast side
starts each round with empty caches, so a reset's time includes loading a game whose PDDL translation
and grammar are not cached yet (`reset_new_game_s_*` counts only those first loads). The transcripts
(observation, sorted admissible commands, won, score) must be identical. Target on an idle machine:
steps >= 4x and resets >= 2x faster.
WebShop (the simulator): the same steps/s, plus search latency p50/p99 over the goals'
instructions (`WebShopTextSim.search`).

WebArena (the local sites in headless Chromium): reset and step latency p50/p95 with 1 and
2 browser contexts working in parallel (one per worker process, each round stepping every
context; a step clicks a random link of the page), and with 2 contexts sharing one worker's
Chromium (stepped one after the other).

Worker start-up, imports and env construction are excluded by a warm-up round.
"""

from __future__ import annotations

import argparse
import gc
import json
import random
import statistics
import time
from dataclasses import replace
from pathlib import Path

from evoharness_rl.config import EnvConfig
from evoharness_rl.envs import env_factory, make_env
from evoharness_rl.rollout.pool import EnvPool, EnvReset, EnvStep, Finish


def pick_action(result, objective: str, rng: random.Random) -> str:
    """A random admissible action; WebShop's search placeholder gets words of the instruction."""
    actions = result.admissible_actions or ["look"]
    action = rng.choice(actions)
    if action.startswith("search["):
        return "search[" + " ".join(objective.split()[:8]) + "]"
    return action


def pool_steps_per_s(env_cfg: EnvConfig, tasks: list[str], workers: int, episodes: int, steps: int, seed: int) -> dict:
    """Sustained env steps/s of `episodes` live episodes stepped together for `steps` rounds.

    An episode that ends is reset on the next task in the same round (counted in `resets`),
    so the pool stays full; cheap envs (WebShop) would otherwise run out of live episodes.
    """
    keys = [f"e{i}" for i in range(episodes)]
    with EnvPool(env_factory(env_cfg), workers, step_timeout_s=600) as pool:
        _check(pool.call([EnvReset(k, tasks[i % len(tasks)], seed) for i, k in enumerate(keys)]))  # warm-up
        rng = random.Random(seed)
        start = time.perf_counter()
        replies = _check(pool.call([EnvReset(k, tasks[(i + 1) % len(tasks)], seed) for i, k in enumerate(keys)]))
        reset_s = time.perf_counter() - start
        state = {k: r.value for k, r in zip(keys, replies)}  # key -> (task, last result)
        next_task, done_steps, resets = episodes + 1, 0, 0
        start = time.perf_counter()
        for _ in range(steps):
            commands = []
            for k in keys:
                task, result = state[k]
                if result.done:
                    commands.append(EnvReset(k, tasks[next_task % len(tasks)], seed))
                    next_task, resets = next_task + 1, resets + 1
                else:
                    commands.append(EnvStep(k, pick_action(result, task.objective, rng)))
                    done_steps += 1
            for k, cmd, reply in zip(keys, commands, _check(pool.call(commands))):
                state[k] = reply.value if isinstance(cmd, EnvReset) else (state[k][0], reply.value)
        step_s = time.perf_counter() - start
        pool.call([Finish(k) for k in keys])
    return {"workers": workers, "episodes": episodes, "steps": done_steps, "resets": resets,
            "steps_per_s": done_steps / step_s, "batched_reset_s": reset_s}


def reset_latency(env_cfg: EnvConfig, tasks: list[str], n: int, seed: int) -> dict:
    """Seconds per reset, one game at a time in this process (first reset excluded: imports)."""
    env = make_env(env_cfg)
    try:
        env.reset(tasks[0], seed)
        times = []
        for task in (tasks[1:] + tasks[:1])[:n]:
            start = time.perf_counter()
            env.reset(task, seed)
            times.append(time.perf_counter() - start)
    finally:
        env.close()
    return {"reset_mean_s": statistics.mean(times), "reset_max_s": max(times), "resets": len(times)}


class DefaultGC:
    """An env factory that first puts Python's default GC thresholds back in its worker (what workers ran
    before `pool.prepare_worker_process`)."""

    def __init__(self, factory):
        self.factory = factory
        self.thresholds = gc.get_threshold()  # this process's: Python's defaults (it never changes its own)

    def __call__(self):
        gc.set_threshold(*self.thresholds)
        return self.factory()


def worker_gc(env_cfg: EnvConfig, tasks: list[str], seed: int, rounds: int = 3) -> dict:
    """Seconds for every task's reset through a fresh 2-worker pool (all sent at once, each a game load),
    with Python's default GC thresholds in the workers and with the workers' own, in alternating rounds."""
    times: dict[str, list[float]] = {"default_gc": [], "worker_gc": []}
    outside = _tasks(env_cfg, "train")[0]
    for _ in range(rounds):
        for name, factory in (("default_gc", DefaultGC(env_factory(env_cfg))), ("worker_gc", env_factory(env_cfg))):
            with EnvPool(factory, num_workers=2, step_timeout_s=600) as pool:
                _check(pool.call([EnvReset(f"warm{i}", outside, seed) for i in range(2)]))  # imports, first load
                keys = [f"gc{i}" for i in range(len(tasks))]
                start = time.perf_counter()
                _check(pool.call([EnvReset(k, t, seed) for k, t in zip(keys, tasks)]))
                times[name].append(time.perf_counter() - start)
    return {f"{name}_loads_s": statistics.median(values) for name, values in times.items()} | {"gc_loads": len(tasks)}


def search_latency(env_cfg: EnvConfig, n: int) -> dict:
    """WebShop simulator search over the goals' instructions: p50 / p99 in milliseconds."""
    env = make_env(env_cfg)
    try:
        queries = [g.get("instruction_text") or g.get("instruction", "") for g in env.goals[:n]]
        env.text_env.search(queries[0])
        times = []
        for query in queries:
            start = time.perf_counter()
            env.text_env.search(query)
            times.append(1000 * (time.perf_counter() - start))
    finally:
        env.close()
    cuts = statistics.quantiles(times, n=100)
    return {"search_p50_ms": statistics.median(times), "search_p99_ms": cuts[98], "searches": len(times)}


def _check(replies):
    errors = [r.error for r in replies if not r.ok]
    if errors:
        raise RuntimeError(f"{len(errors)} environment commands failed, e.g. {errors[0]}")
    return replies


def _tasks(env_cfg: EnvConfig, split: str) -> list[str]:
    env = make_env(env_cfg)
    try:
        return env.task_ids(split)
    finally:
        env.close()


def bench_alfworld(args, size: str) -> dict:
    from evoharness_rl.envs.alfworld.prepare import prepare

    games = args.games if size == "small" else max(4, args.games // 2)
    env_cfg = EnvConfig(name="alfworld", data_dir=str(Path(args.data_dir) / f"alfworld_{size}"))
    env_cfg.alfworld = replace(env_cfg.alfworld, size=size, train_games=1, valid_seen_games=games,
                               valid_unseen_games=1, generator_seed=args.seed)
    start = time.perf_counter()
    prepare(env_cfg)
    prepared_s = time.perf_counter() - start
    tasks = _tasks(env_cfg, "valid_seen")
    steps = args.steps if size == "small" else max(5, args.steps // 2)
    rates = [pool_steps_per_s(env_cfg, tasks, w, args.episodes, steps, args.seed) for w in (1, 2)]
    out = {"env": "alfworld", "size": size, "games": len(tasks), "prepare_s": prepared_s, "pool": rates,
           "speedup_2_workers": rates[1]["steps_per_s"] / rates[0]["steps_per_s"]}
    out.update(reset_latency(env_cfg, tasks, min(len(tasks), 6), args.seed))
    out.update(worker_gc(env_cfg, tasks, args.seed))
    return out


def fast_path_walk(root: Path, fast: bool, steps: int, seed: int) -> dict:
    """One seeded walk over the games of `root`; -> step / reset seconds and the transcript."""
    from evoharness_rl.envs.alfworld import fast_path
    from evoharness_rl.envs.alfworld.adapter import AlfworldEnv

    fast_path.clear_caches()
    env = AlfworldEnv(root, fast_path=fast)
    games = env.task_ids("valid_seen")
    rng = random.Random(seed)
    rows, step_s, reset_s, new_game_s, seen, done, i = [], 0.0, [], [], set(), 0, 0
    while done < steps:
        task = games[i % len(games)]
        start = time.perf_counter()
        _, result = env.reset(task, seed)
        (reset_s if task in seen else new_game_s).append(time.perf_counter() - start)
        seen.add(task)
        rows.append((task, result.observation, sorted(result.admissible_actions)))
        for _ in range(min(25, steps - done)):
            action = rng.choice(result.admissible_actions) if rng.random() < 0.9 else "go to the moon"
            start = time.perf_counter()
            result = env.step(action)
            step_s += time.perf_counter() - start
            done += 1
            rows.append((action, result.observation, sorted(result.admissible_actions), result.won, result.score))
            if result.done:
                break
        i += 1
    env.close()
    return {"steps": done, "step_s": step_s, "resets": reset_s + new_game_s, "new_game_resets": new_game_s,
            "rows": rows}


def bench_alfworld_fast_path(args) -> dict:
    from evoharness_rl.envs.alfworld.prepare import prepare

    env_cfg = EnvConfig(name="alfworld", data_dir=str(Path(args.data_dir) / "alfworld_small"))
    env_cfg.alfworld = replace(env_cfg.alfworld, size="small", train_games=1, valid_seen_games=args.games,
                               valid_unseen_games=1, generator_seed=args.seed)
    root = prepare(env_cfg)
    steps = 10 * args.steps * args.episodes // 8  # 200 steps a side by default
    fast_path_walk(root, True, 10, args.seed)  # warm-up: imports
    runs = {False: [], True: []}
    for _ in range(2):
        for fast in (False, True):
            runs[fast].append(fast_path_walk(root, fast, steps, args.seed))
    side = {fast: {"steps": sum(r["steps"] for r in rs), "step_s": sum(r["step_s"] for r in rs),
                   "resets": [t for r in rs for t in r["resets"]],
                   "new_game": [t for r in rs for t in r["new_game_resets"]]} for fast, rs in runs.items()}
    engine, fast = side[False], side[True]
    step_ms = {k: 1000 * v["step_s"] / v["steps"] for k, v in (("engine", engine), ("fast", fast))}
    reset_s = {k: statistics.mean(v["resets"]) for k, v in (("engine", engine), ("fast", fast))}
    new_game_s = {k: statistics.mean(v["new_game"]) for k, v in (("engine", engine), ("fast", fast))}
    identical = all(r["rows"] == runs[False][0]["rows"] for r in runs[False] + runs[True])
    return {"env": "alfworld_fast_path", "games": args.games, "steps": engine["steps"],
            "step_ms_engine": step_ms["engine"], "step_ms_fast": step_ms["fast"],
            "fast_vs_engine_steps": step_ms["engine"] / step_ms["fast"],
            "reset_s_engine": reset_s["engine"], "reset_s_fast": reset_s["fast"],
            "fast_vs_engine_reset": reset_s["engine"] / reset_s["fast"],
            "reset_new_game_s_engine": new_game_s["engine"], "reset_new_game_s_fast": new_game_s["fast"],
            "transcripts_identical": identical}


def bench_webshop(args) -> dict:
    env_cfg = EnvConfig(name="webshop", data_dir=str(Path(args.data_dir) / "webshop"), max_steps_eval=20)
    tasks = _tasks(env_cfg, "test")
    # a WebShop step is sub-millisecond: 4x the episodes and rounds so the measurement is not all IPC
    rates = [pool_steps_per_s(env_cfg, tasks, w, 4 * args.episodes, 4 * args.steps, args.seed) for w in (1, 2)]
    out = {"env": "webshop", "pool": rates, "speedup_2_workers": rates[1]["steps_per_s"] / rates[0]["steps_per_s"]}
    out.update(reset_latency(env_cfg, tasks, 20, args.seed))
    out.update(search_latency(env_cfg, 200))
    return out


def _quantiles(times: list[float]) -> tuple[float, float]:
    cuts = statistics.quantiles(times, n=20) if len(times) > 1 else times * 19
    return statistics.median(times), cuts[18]


def webarena_latency(env_cfg: EnvConfig, tasks: list[str], workers: int, contexts: int, rounds: int,
                     seed: int) -> dict:
    """Round latency of resetting / stepping `contexts` live episodes spread over `workers` processes."""
    import re

    keys = [f"w{i}" for i in range(contexts)]
    link = re.compile(r"\[(\w+)\] link '")
    rng = random.Random(seed)
    with EnvPool(env_factory(env_cfg), workers, step_timeout_s=600) as pool:
        _check(pool.call([EnvReset(k, tasks[i], seed) for i, k in enumerate(keys)]))  # warm-up: browser start
        reset_times, step_times, state = [], [], {}
        for r in range(rounds):
            start = time.perf_counter()
            replies = _check(pool.call([EnvReset(k, tasks[(r * contexts + i) % len(tasks)], seed)
                                        for i, k in enumerate(keys)]))
            reset_times.append(time.perf_counter() - start)
            state = {k: reply.value[1] for k, reply in zip(keys, replies)}
            for _ in range(4):
                commands = [EnvStep(k, f"click [{rng.choice(link.findall(state[k].observation) or ['8'])}]")
                            for k in keys]
                start = time.perf_counter()
                replies = _check(pool.call(commands))
                step_times.append(time.perf_counter() - start)
                state = {k: reply.value for k, reply in zip(keys, replies)}
        pool.call([Finish(k) for k in keys])
    (reset_p50, reset_p95), (step_p50, step_p95) = _quantiles(reset_times), _quantiles(step_times)
    return {"workers": workers, "contexts": contexts, "resets": len(reset_times) * contexts,
            "steps": len(step_times) * contexts, "reset_p50_s": reset_p50, "reset_p95_s": reset_p95,
            "step_p50_s": step_p50, "step_p95_s": step_p95,
            "steps_per_s": len(step_times) * contexts / sum(step_times)}


def bench_webarena(args) -> dict:
    env_cfg = EnvConfig(name="webarena", data_dir=str(Path(args.data_dir) / "webarena"))
    tasks = _tasks(env_cfg, "test")
    rounds = max(3, args.steps // 2)
    runs = [webarena_latency(env_cfg, tasks, w, c, rounds, args.seed) for w, c in ((1, 1), (2, 2), (1, 2))]
    for run in runs:
        print(f"webarena           workers={run['workers']} contexts={run['contexts']}  reset p50 "
              f"{run['reset_p50_s']:.3f}s p95 {run['reset_p95_s']:.3f}s  step p50 {run['step_p50_s']:.3f}s p95 "
              f"{run['step_p95_s']:.3f}s  ({run['steps_per_s']:.1f} steps/s over {run['steps']} steps; latency "
              "per round, every context stepped once)")
    return {"env": "webarena", "latency": runs}


def _print(result: dict) -> None:
    if result["env"] == "alfworld_fast_path":
        print(f"alfworld fast path  {result['steps']} steps a side over {result['games']} games: step "
              f"{result['step_ms_engine']:.2f} -> {result['step_ms_fast']:.2f} ms ({result['fast_vs_engine_steps']:.1f}x), "
              f"reset {result['reset_s_engine']:.3f} -> {result['reset_s_fast']:.3f} s "
              f"({result['fast_vs_engine_reset']:.1f}x; a game's first load {result['reset_new_game_s_engine']:.3f} -> "
              f"{result['reset_new_game_s_fast']:.3f} s), transcripts identical: {result['transcripts_identical']}")
        return
    name = result["env"] + (f" ({result['size']})" if "size" in result else "")
    for rate in result["pool"]:
        print(f"{name:<18} workers={rate['workers']}  {rate['steps_per_s']:8.1f} env steps/s  "
              f"({rate['episodes']} live episodes, {rate['steps']} steps, {rate['resets']} resets; "
              f"first batched reset {rate['batched_reset_s']:.2f}s)")
    extra = f"  search p50 {result['search_p50_ms']:.2f} ms p99 {result['search_p99_ms']:.2f} ms" \
        if "search_p50_ms" in result else ""
    print(f"{name:<18} 2 vs 1 workers: {result['speedup_2_workers']:.2f}x   reset {result['reset_mean_s']:.3f}s "
          f"mean (max {result['reset_max_s']:.3f}s){extra}")
    if "gc_loads" in result:
        print(f"{name:<18} {result['gc_loads']} game loads on 2 workers: {result['worker_gc_loads_s']:.2f}s with the "
              f"workers' GC thresholds, {result['default_gc_loads_s']:.2f}s with Python's defaults (median of 3)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--envs", default="alfworld,alfworld_fast_path,webshop,webarena",
                        help="comma-separated: alfworld, alfworld_fast_path, webshop, webarena")
    parser.add_argument("--sizes", default="small,large", help="ALFWorld game sizes to measure")
    parser.add_argument("--games", type=int, default=8, help="generated valid_seen games per size (large: half)")
    parser.add_argument("--episodes", type=int, default=8, help="live episodes over the pool")
    parser.add_argument("--steps", type=int, default=20, help="rounds of steps (large games: half)")
    parser.add_argument("--data-dir", default="data/bench", help="where generated benchmark data is cached")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", help="also write the results to this JSON file ({name: result}, e.g. "
                        "alfworld_small, alfworld_fast_path, webshop)")
    args = parser.parse_args()
    results = []
    envs = args.envs.split(",")
    if "alfworld" in envs:
        for size in args.sizes.split(","):
            results.append(bench_alfworld(args, size))
            _print(results[-1])
    if "alfworld_fast_path" in envs:
        results.append(bench_alfworld_fast_path(args))
        _print(results[-1])
    if "webshop" in envs:
        results.append(bench_webshop(args))
        _print(results[-1])
    if "webarena" in envs:
        results.append(bench_webarena(args))
    if args.json:
        by_name = {r["env"] + (f"_{r['size']}" if "size" in r else ""): r for r in results}
        Path(args.json).write_text(json.dumps(by_name, indent=2) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
