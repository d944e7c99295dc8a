"""What an update logs: rollout outcomes, loss statistics summed over processes, memory."""

from __future__ import annotations

from typing import Any, Optional

import torch

from evoharness_rl.harness.protocol import HARNESS_VERBS

LOSS_STATS = ("clip_frac", "approx_kl", "kl_ref", "entropy", "ratio_mean")  # token means from core.policy_loss
MAX_STATS = ("ratio_max", "kl_ref_max")  # maxima over loss tokens from core.policy_loss
OFF_POLICY_STATS = ("is_weight_mean", "is_clip_frac")  # token means of the off-policy correction (grpo.max_staleness)
OFF_POLICY_MAX = ("is_weight_max",)


class StatSums:
    """Sums of an update's loss statistics (token-weighted) and counters, reduced over processes in `means`."""

    COUNTS = ("loss_tokens", "loss_sum", "train_tokens", "grad_norm_sum", "optimizer_steps", "step_s")

    def __init__(self):
        self.weighted = dict.fromkeys(LOSS_STATS + OFF_POLICY_STATS, 0.0)
        self.counts = dict.fromkeys(self.COUNTS, 0.0)
        self.maxima = dict.fromkeys(MAX_STATS + OFF_POLICY_MAX, 0.0)  # the largest ratio / unclamped k3 / weight
        self.off_policy = False  # the loss reported the off-policy correction's statistics
        self.bad_reason: Optional[str] = None

    def add_tokens(self, stats: dict) -> None:
        """Statistics of `core.policy_loss` (token means) weighted by their token count."""
        self.off_policy = self.off_policy or OFF_POLICY_STATS[0] in stats
        for k in self.weighted:
            self.weighted[k] += stats.get(k, 0.0) * stats["tokens"]
        self.counts["loss_tokens"] += stats["tokens"]
        for k in self.maxima:
            self.maxima[k] = max(self.maxima[k], stats.get(k, 0.0))

    def count(self, key: str, value: float) -> None:
        self.counts[key] += value

    def merge(self, other: "StatSums") -> None:
        for k, v in other.weighted.items():
            self.weighted[k] += v
        for k, v in other.counts.items():
            self.counts[k] += v
        for k in self.maxima:
            self.maxima[k] = max(self.maxima[k], other.maxima[k])
        self.off_policy = self.off_policy or other.off_policy

    def means(self, accelerator: Any) -> dict:
        weighted = tuple(self.weighted)
        local = [self.weighted[k] for k in weighted] + [self.counts[k] for k in self.COUNTS]
        summed = dict(zip(weighted + self.COUNTS, sum_over_processes(accelerator, local)))
        world = accelerator.num_processes
        tokens, steps, step_s = summed["loss_tokens"], summed["optimizer_steps"] / world, summed["step_s"] / world
        out = {k: summed[k] / tokens if tokens else 0.0 for k in weighted}
        for k, values in zip(self.maxima, zip(*gather_objects(accelerator, [tuple(self.maxima.values())]))):
            out[k] = max(values)
        if not self.off_policy:
            for k in OFF_POLICY_STATS + OFF_POLICY_MAX:
                del out[k]
        out.update(
            # each process's loss is its share of the mini-batch objective (scaled by W): the mean is the objective
            loss=summed["loss_sum"] / world / steps if steps else 0.0,
            loss_tokens=int(tokens), train_tokens=int(summed["train_tokens"]), optimizer_steps=int(steps),
            grad_norm=summed["grad_norm_sum"] / world / steps if steps else 0.0,
            train_tokens_per_s=summed["train_tokens"] / step_s if step_s else 0.0,
        )
        return out


def sum_over_processes(accelerator: Any, values: list[float]) -> list[float]:
    if accelerator.num_processes == 1:
        return values
    tensor = torch.tensor(values, dtype=torch.float64, device=accelerator.device)
    return accelerator.reduce(tensor, reduction="sum").tolist()


def gather_objects(accelerator: Any, items: list) -> list:
    """Every process's `items`, concatenated in process order (on every process)."""
    if accelerator.num_processes == 1:
        return list(items)
    from accelerate.utils import gather_object

    return gather_object(items)


def rollout_metrics(accelerator: Any, trajs: list, engine_stats: Any) -> dict:
    """Success, reward components, harness use and action quality over all processes' trajectories."""
    rows = gather_objects(accelerator, [_summary(t) for t in trajs])
    ok = [r for r in rows if r["error"] is None]
    n = max(len(ok), 1)
    steps = max(sum(r["steps"] for r in ok), 1)
    out = {
        "episodes": len(rows),
        "errors": len(rows) - len(ok),
        "success_rate": sum(r["won"] for r in ok) / n,
        "steps_per_episode": sum(r["steps"] for r in ok) / n,
        "harness_calls_per_episode": sum(sum(r["calls"].values()) for r in ok) / n,
        "invalid_rate": sum(r["invalid"] for r in ok) / steps,
        "repeat_rate": sum(r["repeats"] for r in ok) / steps,
        "token_capped_rate": sum(r["capped"] for r in ok) / n,  # accumulated: ended by policy.max_trajectory_tokens
        "generated_tokens": sum(r["tokens"] for r in rows),
        "prompt_tokens": sum(r["prompt_tokens"] for r in rows),
    }
    for verb in HARNESS_VERBS:
        out[f"harness/{verb}_per_episode"] = sum(r["calls"].get(verb, 0) for r in ok) / n
    for key in ("r_grpo", "r_div", "r_eff", "total"):
        out[f"reward/{key}"] = sum(r["rewards"].get(key, 0.0) for r in ok) / n
    stats = engine_stats  # this process's latest RolloutEngine.run
    out["rollout_tokens_per_s"] = stats.generated_tokens / stats.wall_s if stats.wall_s else 0.0
    return out


def _summary(t) -> dict:
    return {"error": t.error, "won": bool(t.won), "capped": bool(t.token_capped), "steps": t.steps,
            "calls": dict(t.harness_calls),
            "invalid": t.invalid_count, "repeats": t.repeat_count, "rewards": dict(t.rewards),
            "tokens": t.generated_tokens, "prompt_tokens": sum(len(turn.prompt_ids) for turn in t.turns)}


def memory_metrics() -> dict:
    import psutil

    import resource

    out = {"rss_gb": psutil.Process().memory_info().rss / 2**30,
           "rss_peak_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20}  # Linux: KiB; the process's peak
    if torch.cuda.is_available():
        out["cuda_max_allocated_gb"] = torch.cuda.max_memory_allocated() / 2**30
        torch.cuda.reset_peak_memory_stats()
    return out
