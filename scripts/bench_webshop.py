"""Benchmark the WebShop simulator at the configured catalogue size (default 5,000 products).

    python scripts/bench_webshop.py [--data-dir data] [--products 5000] [--goals 2000] [--queries 2000] [--no-teacher]

Prints (and returns from `bench`): catalogue preparation and index build time, search
latency p50/p99 in wall-clock and CPU time (target: p99 <= 20 ms at 5,000 products;
on a busy shared machine the wall-clock tail is mostly waiting for a core), simulator steps/s (pages
rendered by scripted episodes, policy time excluded), and on all test goals: the
scripted shopper's success and score with a 20-step budget (env_only and adaptive,
harness_rate 0.5) next to a naive baseline (open the first hit, pick the options, buy).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import time
from typing import Any

import numpy as np

from evoharness_rl.config import EnvConfig
from evoharness_rl.envs.webshop.adapter import WebShopEnv
from evoharness_rl.envs.webshop.catalogue import load_catalogue, prepare
from evoharness_rl.envs.webshop.pages import parse_page, parse_request
from evoharness_rl.envs.webshop.simulator import search_index
from evoharness_rl.rollout.episode import Episode, EpisodeSettings
from evoharness_rl.runlog import progress

BUDGET = 20  # WebShop step budget (paper)


def search_latency(env: WebShopEnv, n_queries: int) -> dict[str, float]:
    """p50/p99 of one search over the catalogue: instructions, attribute queries and short queries."""
    goals = env.goals
    queries = []
    for i in range(n_queries):
        goal = goals[i % len(goals)]
        queries.append([goal["instruction_text"], parse_request(goal["instruction_text"]).search_query(),
                        goal["product_type"]][i % 3])
    simulator = env.text_env
    simulator.search("warm up")
    wall, cpu = [], []
    for query in queries:
        start, start_cpu = time.perf_counter(), time.thread_time()
        simulator.search(query)
        wall.append(time.perf_counter() - start)
        cpu.append(time.thread_time() - start_cpu)
    wall_ms, cpu_ms = np.array(wall) * 1000, np.array(cpu) * 1000
    # Wall-clock tails include time the process waits for a core on a shared machine; CPU time does not.
    return {"search_p50_ms": float(np.percentile(wall_ms, 50)), "search_p99_ms": float(np.percentile(wall_ms, 99)),
            "search_cpu_p50_ms": float(np.percentile(cpu_ms, 50)),
            "search_cpu_p99_ms": float(np.percentile(cpu_ms, 99)),
            "search_queries": len(queries), "load_average_1min": os.getloadavg()[0], "cpus": os.cpu_count()}


def play(env: WebShopEnv, task_ids: list[str], mode: str, rate: float) -> dict[str, float]:
    """Scripted episodes: success, score (mean reward x 100), steps, and env steps/s (env time only)."""
    episode = Episode(env, EpisodeSettings(mode=mode, max_steps=BUDGET, recall_k=6))
    wins, reward, steps, env_steps, env_time = 0, 0.0, 0, 0, 0.0
    original_step = env.step

    def timed_step(action: str):
        nonlocal env_steps, env_time
        start = time.perf_counter()
        result = original_step(action)
        env_time += time.perf_counter() - start
        env_steps += 1
        return result

    env.step = timed_step  # type: ignore[method-assign]
    try:
        for i, task_id in enumerate(progress(task_ids, description=f"teacher {mode}")):
            episode.reset(task_id)
            rng = random.Random(i)
            while not episode.done:
                episode.step(episode.teacher_response(rate, rng))
            wins += episode.record.won
            reward += episode.record.score
            steps += episode.record.steps
    finally:
        del env.step
    n = len(task_ids)
    return {"success": wins / n, "score": 100 * reward / n, "mean_steps": steps / n,
            "env_steps_per_s": env_steps / env_time if env_time else 0.0}


def naive(env: WebShopEnv, task_ids: list[str]) -> dict[str, float]:
    """Open the first search hit, click the requested option values, buy."""
    wins, reward = 0, 0.0
    for task_id in task_ids:
        task, _ = env.reset(task_id)
        request = parse_request(task.objective)
        results = env.step(f"search[{request.search_query()}]")
        page = parse_page(results.observation, results.admissible_actions)
        if page.results:
            item = env.step(f"click[{page.results[0].asin.lower()}]")
            for value in request.options.values():
                if f"click[{value}]" in item.admissible_actions:
                    env.step(f"click[{value}]")
            final = env.step("click[buy now]")
            wins += final.won
            reward += final.score
    return {"success": wins / len(task_ids), "score": 100 * reward / len(task_ids)}


def bench(env_cfg: Any, n_queries: int = 2000, teacher: bool = True) -> dict[str, Any]:
    start = time.perf_counter()
    folder = prepare(env_cfg)
    prepared_s = time.perf_counter() - start
    start = time.perf_counter()
    prepare(env_cfg)
    cached_s = time.perf_counter() - start
    catalogue = load_catalogue(folder)
    start = time.perf_counter()
    search_index(catalogue)
    index_s = time.perf_counter() - start
    env = WebShopEnv.from_config(env_cfg)
    out: dict[str, Any] = {"products": len(catalogue.products), "goals": len(catalogue.goals),
                           "prepare_s": prepared_s, "prepare_cached_s": cached_s, "index_build_s": index_s}
    out.update(search_latency(env, n_queries))
    if teacher:
        test_ids = env.task_ids("test")
        out["test_goals"] = len(test_ids)
        out["teacher_env_only"] = play(env, test_ids, "env_only", 0.0)
        out["teacher_adaptive_rate_0.5"] = play(env, test_ids, "adaptive", 0.5)
        out["naive_first_result"] = naive(env, test_ids)
    env.close()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--data-dir", default="data", help="where the catalogue is prepared (env.data_dir)")
    parser.add_argument("--products", type=int, default=EnvConfig().webshop.num_products)
    parser.add_argument("--goals", type=int, default=EnvConfig().webshop.num_goals)
    parser.add_argument("--queries", type=int, default=2000, help="searches timed for the latency percentiles")
    parser.add_argument("--no-teacher", action="store_true", help="skip the scripted-shopper episodes")
    args = parser.parse_args()
    env_cfg = EnvConfig(name="webshop", data_dir=args.data_dir)
    env_cfg.webshop.num_products, env_cfg.webshop.num_goals = args.products, args.goals
    print(json.dumps(bench(env_cfg, args.queries, teacher=not args.no_teacher), indent=2))


if __name__ == "__main__":
    main()
