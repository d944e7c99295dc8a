"""From trajectories to padded training tensors: samples, batch sizes, mini- and micro-batches.

Units (every batch knob names its unit):
- *prompts*: tasks; `grpo.prompts_per_update` is global, each process rolls out its share;
- *trajectories*: episodes; a task's `group_size` trajectories form its GRPO group and
  always live on the same process, so advantages never need communication;
- *samples*: training rows. `per_turn` context: one row per turn (prompt + completion,
  the turn's advantage is its trajectory's); `accumulated`: one row per trajectory (the
  whole conversation, environment tokens masked out of the loss; every turn's prompt is
  the sequence before its completion -- checked -- so each completion is scored in the
  context it was sampled in);
- mini-batch: `grpo.mini_batch_trajectories` trajectories (global) per optimizer step;
- micro-batch: at most `grpo.micro_batch_samples` rows per forward/backward, per process.

Three layouts of a micro-batch (`LAYOUTS`), the same [B, K] loss tensors (B samples, the last K
tokens of each, right-aligned):
- shared (`pack(share_prefixes=True)`, `grpo.share_prefixes`, the default where the model's
  attention takes a 4D mask -- `policy.layout_works`): packed as below, but samples that open
  with the same tokens (per-turn samples: the system prompt, the task's objective; the samples
  of one micro-batch are taken in token order) form a unit whose common prefix is laid out once,
  then each member's remaining tokens with positions continuing the prefix's. A [R, 1, W, W]
  block mask lets every member attend to the prefix and, causally, to itself, so each token
  sees exactly what it saw alone. On a diagnostics GRPO update's own samples the model reads
  0.58 of their tokens; where sharing saves little, nothing is shared (`SHARE_PREFIX_GAIN`);
- packed (`pack`, `grpo.pack_samples`, where the model supports it -- `policy.layout_works`):
  samples are laid end to end in rows as wide as the longest one (first-fit decreasing),
  each restarting its position ids at 0 and no attention mask, so the model's attention
  keeps every sample to itself (transformers reads packed sequences from the position ids:
  a block-diagonal causal mask, or varlen flash attention on a GPU). When sharing rows
  would save little (fewer than `SHARE_ROWS_GAIN` times fewer rows), each sample keeps a
  row of its own, right-padded, and the rows need no mask at all: plain causal attention,
  whose fast kernels a block mask would lose. Either way the LM head runs only on the
  positions that predict a loss token;
- padded (`collate`, the fallback): one row per sample, left-padded so that every row's
  loss tokens sit in the last K positions; the model then only computes logits for those
  K positions (`logits_to_keep`), which for per-turn samples (long prompt, short
  completion) saves most of the LM-head cost.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Optional

import torch

from evoharness_rl.config import ConfigError


# ------------------------------------------------------------------------- batch plan


@dataclass(frozen=True)
class BatchPlan:
    """Batch sizes of one update, global and per process, checked to divide evenly."""

    prompts_per_update: int  # tasks per update (global)
    group_size: int  # trajectories per task
    mini_batch_trajectories: int  # trajectories per optimizer step (global)
    micro_batch_samples: int  # rows per forward/backward (per process)
    inner_epochs: int  # passes over the update's rollouts
    world_size: int  # training processes

    @property
    def trajectories_per_update(self) -> int:
        return self.prompts_per_update * self.group_size

    @property
    def prompts_per_process(self) -> int:
        return self.prompts_per_update // self.world_size

    @property
    def mini_batches(self) -> int:
        """Optimizer steps per inner epoch."""
        return self.trajectories_per_update // self.mini_batch_trajectories

    @property
    def mini_batch_trajectories_per_process(self) -> int:
        return self.mini_batch_trajectories // self.world_size

    @property
    def optimizer_steps_per_update(self) -> int:
        return self.mini_batches * self.inner_epochs

    def describe(self) -> str:
        return (
            f"{self.prompts_per_update} prompts x {self.group_size} trajectories = {self.trajectories_per_update} "
            f"trajectories per update ({self.prompts_per_process} prompts per process on {self.world_size} "
            f"process(es)); {self.mini_batches} mini-batch(es) of {self.mini_batch_trajectories} trajectories "
            f"({self.mini_batch_trajectories_per_process} per process) x {self.inner_epochs} inner epoch(s) = "
            f"{self.optimizer_steps_per_update} optimizer step(s) per update; micro-batches of at most "
            f"{self.micro_batch_samples} samples per process"
        )


def make_plan(grpo_cfg, world_size: int) -> BatchPlan:
    """The update's batch sizes; raises ConfigError showing the arithmetic when they do not divide."""
    plan = BatchPlan(
        grpo_cfg.prompts_per_update, grpo_cfg.group_size, grpo_cfg.mini_batch_trajectories,
        grpo_cfg.micro_batch_samples, grpo_cfg.inner_epochs, world_size,
    )
    P, G, M, W = plan.prompts_per_update, plan.group_size, plan.mini_batch_trajectories, world_size
    if P % W:
        raise ConfigError(
            f"grpo.prompts_per_update={P} does not divide across {W} processes ({P} / {W} = {P / W:.2f}); "
            f"use a multiple of {W}, e.g. {max(W, P - P % W)}"
        )
    if (P * G) % M:
        raise ConfigError(
            f"grpo.mini_batch_trajectories={M} does not divide the {P} x {G} = {P * G} trajectories of an update "
            f"({P * G} / {M} = {P * G / M:.2f}); use a divisor of {P * G}"
        )
    if M % W:
        raise ConfigError(
            f"grpo.mini_batch_trajectories={M} does not divide across {W} processes ({M} / {W} = {M / W:.2f}); "
            f"use a multiple of {W}"
        )
    return plan


# ---------------------------------------------------------------------------- samples


@dataclass
class Sample:
    """One training row: token ids, which of them are the policy's, and their behaviour logprobs."""

    input_ids: list[int]  # prompt + completion (per_turn) or the whole conversation (accumulated)
    loss_mask: list[int]  # 1 on tokens the policy generated
    old_logprobs: list[float]  # sampling logprob of each token (0 where loss_mask is 0)
    advantage: float  # the trajectory's group-normalised advantage
    trajectory: int  # index of the trajectory in the update's batch
    ref_logprobs: Optional[list[float]] = None  # reference logprob of each token, once the update's no-grad pass ran
    traj_tokens: int = 0  # loss tokens of the whole trajectory, all its rows together (grpo.loss_agg=traj_mean)
    behaviour_logprobs: Optional[list[float]] = None  # grpo.max_staleness > 0: the sampler's logprobs, once
    # old_logprobs hold the proximal policy's (the update's no-grad pass)

    @property
    def loss_tokens(self) -> int:
        return sum(self.loss_mask)


def samples_from_trajectory(traj, advantage: float, index: int,
                            turn_advantages: Optional[list[float]] = None) -> list[Sample]:
    """Training rows of one trajectory (see module docstring); token ids are used as generated.

    `turn_advantages` (per-turn context, one per turn): added to `advantage` in that turn's row (step-level
    advantages, grpo.step_advantage_weight).
    """
    if traj.context == "accumulated":
        if turn_advantages:
            raise ValueError("step-level advantages need per-turn samples; accumulated context has one row")
        return _accumulated_sample(traj, advantage, index)
    if turn_advantages is not None and len(turn_advantages) != len(traj.turns):
        raise ValueError(f"{len(turn_advantages)} turn advantages for {len(traj.turns)} turns of {traj.task_id!r}")
    rows = []
    for position, turn in enumerate(traj.turns):
        if not turn.completion_ids:
            continue
        turn.check_tokens()
        if not turn.prompt_ids:
            raise ValueError(
                f"trajectory {traj.task_id!r} turn {turn.index} has completion ids but no prompt ids; GRPO needs a "
                "token backend (policy.backend=hf|vllm|vllm_server) that records both"
            )
        n_prompt, n_completion = len(turn.prompt_ids), len(turn.completion_ids)
        rows.append(Sample(
            input_ids=list(turn.prompt_ids) + list(turn.completion_ids),
            loss_mask=[0] * n_prompt + [1] * n_completion,
            old_logprobs=[0.0] * n_prompt + list(turn.logprobs),
            advantage=advantage + (turn_advantages[position] if turn_advantages else 0.0),
            trajectory=index,
        ))
    total = sum(row.loss_tokens for row in rows)
    for row in rows:
        row.traj_tokens = total
    return rows


def _accumulated_sample(traj, advantage: float, index: int) -> list[Sample]:
    n = len(traj.sequence_ids)
    if not (n == len(traj.loss_mask) == len(traj.sequence_logprobs)):
        raise ValueError(
            f"trajectory {traj.task_id!r}: sequence_ids ({n}), loss_mask ({len(traj.loss_mask)}) and "
            f"sequence_logprobs ({len(traj.sequence_logprobs)}) must have the same length"
        )
    if not any(traj.loss_mask):
        return []
    if traj.loss_mask[0]:
        raise ValueError(f"trajectory {traj.task_id!r}: the first token cannot be a loss token (nothing predicts it)")
    for turn in traj.turns:  # the row scores each completion after the whole sequence before it: its prompt, exactly
        n, completion = len(turn.prompt_ids), list(turn.completion_ids)
        if turn.prompt_ids and (traj.sequence_ids[:n] != list(turn.prompt_ids)
                                or traj.sequence_ids[n:n + len(completion)] != completion):
            raise ValueError(
                f"trajectory {traj.task_id!r} turn {turn.index} was sampled after a prompt that is not the sequence "
                "before its completion (a conversation cut after the fact?); training would score it in another "
                "context. The rollout engine cuts only what a turn adds (rollout/engine.py)"
            )
    logprobs = [lp if m else 0.0 for lp, m in zip(traj.sequence_logprobs, traj.loss_mask)]
    return [Sample(list(traj.sequence_ids), list(traj.loss_mask), logprobs, advantage, index,
                   traj_tokens=sum(traj.loss_mask))]


# ----------------------------------------------------------------------- micro-batches


@dataclass
class MicroBatch:
    """Model inputs of up to `micro_batch_samples` samples (padded or packed) and their [B, K] loss tensors."""

    input_ids: torch.Tensor  # [B, L] padded | [R, W] packed rows
    attention_mask: Optional[torch.Tensor]  # [B, L] 1 on real tokens | packed: None (the position ids tell), or with
    #   shared prefixes the [R, 1, W, W] bool block mask
    position_ids: torch.Tensor  # [B, L] | [R, W]: 0-based positions within each sample
    targets: torch.Tensor  # [B, K] the last K tokens of each sample (what the kept logits predict)
    loss_mask: torch.Tensor  # [B, K] 1 on policy tokens
    old_logp: torch.Tensor  # [B, K] behaviour logprobs
    adv: torch.Tensor  # [B]
    traj_tokens: torch.Tensor  # [B] loss tokens of each row's whole trajectory (grpo.loss_agg=traj_mean)
    ref_logp: Optional[torch.Tensor] = None  # [B, K] reference logprobs (from the update's no-grad pass)
    behaviour_logp: Optional[torch.Tensor] = None  # [B, K] the sampler's logprobs when old_logp is the proximal policy's
    keep_positions: Optional[torch.Tensor] = None  # packed: [N] positions of the flattened rows that predict a loss token
    gather: Optional[torch.Tensor] = None  # packed: [B, K] index into keep_positions of each loss token (0 elsewhere)
    tokens: int = 0  # real (non-padding) tokens the model reads

    @property
    def keep(self) -> int:
        """K: trailing positions that hold every loss token."""
        return self.targets.shape[1]

    @property
    def packed(self) -> bool:
        return self.keep_positions is not None

    def to(self, device) -> "MicroBatch":
        moved = {name: (value.to(device) if isinstance(value, torch.Tensor) else value)
                 for name, value in vars(self).items()}
        return MicroBatch(**moved)


def _right_aligned(rows: list[list], width: int, fill) -> list[list]:
    """The last `width` items of each row, left-filled with `fill` up to `width`."""
    return [[fill] * (width - len(r[-width:])) + list(r[-width:]) for r in rows]


def _loss_window(samples: list[Sample]) -> tuple[int, dict[str, Optional[torch.Tensor]]]:
    """K and the right-aligned [B, K] targets, loss mask, behaviour (and reference) logprobs of `samples`."""
    K = max(len(s.input_ids) - s.loss_mask.index(1) if 1 in s.loss_mask else 1 for s in samples)
    with_ref = all(s.ref_logprobs is not None for s in samples)
    off_policy = any(s.behaviour_logprobs is not None for s in samples)  # the padding sample has none: its old ones
    window = dict(
        targets=torch.tensor(_right_aligned([s.input_ids for s in samples], K, 0), dtype=torch.long),
        loss_mask=torch.tensor(_right_aligned([s.loss_mask for s in samples], K, 0), dtype=torch.long),
        old_logp=torch.tensor(_right_aligned([s.old_logprobs for s in samples], K, 0.0), dtype=torch.float32),
        ref_logp=(torch.tensor(_right_aligned([s.ref_logprobs for s in samples], K, 0.0), dtype=torch.float32)
                  if with_ref else None),
        behaviour_logp=(torch.tensor(_right_aligned([s.old_logprobs if s.behaviour_logprobs is None
                                                     else s.behaviour_logprobs for s in samples], K, 0.0),
                                     dtype=torch.float32) if off_policy else None),
        adv=torch.tensor([s.advantage for s in samples], dtype=torch.float32),
        traj_tokens=torch.tensor([max(s.traj_tokens, 1) for s in samples], dtype=torch.float32),
    )
    return K, window


def collate(samples: list[Sample], pad_id: int) -> MicroBatch:
    """Left-pad `samples` into one MicroBatch (see module docstring for why left padding)."""
    L = max(len(s.input_ids) for s in samples)
    K, window = _loss_window(samples)
    input_ids = torch.tensor(_right_aligned([s.input_ids for s in samples], L, pad_id), dtype=torch.long)
    attention = torch.tensor(_right_aligned([[1] * len(s.input_ids) for s in samples], L, 0), dtype=torch.long)
    position_ids = (attention.cumsum(dim=1) - 1).clamp(min=0)  # [B, L]
    window["targets"] = input_ids[:, L - K:]  # the same values; padding ids where a row is shorter than K
    return MicroBatch(input_ids=input_ids, attention_mask=attention, position_ids=position_ids,
                      tokens=sum(len(s.input_ids) for s in samples), **window)


SHARE_ROWS_GAIN = 1.25  # samples share rows only when that needs this many times fewer rows than one per row
MIN_SHARED_PREFIX = 8  # tokens: a shorter common prefix is not worth a block mask
SHARE_PREFIX_GAIN = 1.25  # prefixes are shared only when that needs this many times fewer rows (the block mask
# costs the fast mask-free attention: on the demo's ALFWorld samples, 7% fewer tokens ran 0.78x as fast)


def pack(samples: list[Sample], pad_id: int, share_prefixes: bool = False) -> MicroBatch:
    """Lay `samples` end to end in rows as wide as the longest (first-fit decreasing); see module docstring.

    `share_prefixes`: samples that begin with the same tokens (the system prompt, a task's objective) form a unit
    whose common prefix is laid out once, followed by each member's suffix; a [R, 1, W, W] block mask lets every
    suffix attend to its unit's prefix and, causally, to itself (`_prefix_units`, `_block_mask`).
    """
    W = max(len(s.input_ids) for s in samples)
    units = [(0, [i]) for i in range(len(samples))]
    widths = [len(s.input_ids) for s in samples]
    rows = _rows(widths, W)
    if share_prefixes:  # only where it pays for the block mask (plain causal attention is faster)
        shared_units = _prefix_units(samples, W)
        shared_widths = [_unit_width(samples, P, members) for P, members in shared_units]
        shared_rows = _rows(shared_widths, W)
        if len(rows) >= SHARE_PREFIX_GAIN * len(shared_rows):
            units, widths, rows = shared_units, shared_widths, shared_rows
    ids: list[list[int]] = []
    positions: list[list[int]] = []
    segments: list[list[int]] = []  # the segment of every position: a prefix, a suffix, or one padding position
    prefix_of: list[list[int]] = []  # the segment of the prefix a suffix position also attends to (-1: none)
    start: dict[int, int] = {}  # sample -> where its token 0 would sit in the flattened rows (its token t >= P at +t)
    for r, members in enumerate(rows):
        row_ids: list[int] = []
        row_positions: list[int] = []
        row_segments: list[int] = []
        row_prefix: list[int] = []
        for u in members:
            P, unit = units[u]
            prefix_segment = r * W + len(row_ids)  # a segment is named by its first flat position
            if P:
                row_ids += samples[unit[0]].input_ids[:P]
                row_positions += range(P)
                row_segments += [prefix_segment] * P
                row_prefix += [-1] * P
            for i in unit:
                n = len(samples[i].input_ids)
                start[i] = r * W + len(row_ids) - P
                row_segments += [r * W + len(row_ids)] * (n - P)
                row_ids += samples[i].input_ids[P:]
                row_positions += range(P, n)
                row_prefix += [prefix_segment if P else -1] * (n - P)
        tail = W - len(row_ids)
        ids.append(row_ids + [pad_id] * tail)
        own_row = len(members) == 1 and units[members[0]][0] == 0
        # Shared rows: the tail padding is a segment of its own. Own rows: it continues the sample's positions,
        # so every row reads as one sequence and the model uses its plain causal attention (the padding comes
        # after every real token, which therefore never sees it).
        positions.append(list(range(W)) if own_row else row_positions + list(range(tail)))
        segments.append(row_segments + ([row_segments[0]] * tail if own_row else list(range(r * W + W - tail, r * W + W))))
        prefix_of.append(row_prefix + [-1] * tail)
    K, window = _loss_window(samples)
    # Positions (in the flattened [R * W] rows) that predict a loss token: position p predicts the token at p + 1.
    wanted: list[tuple[int, int, int]] = []  # (sample, K column, predicting position)
    for i, s in enumerate(samples):
        n = len(s.input_ids)
        mask = s.loss_mask
        for t in range(max(1, n - K), n):
            if mask[t]:
                wanted.append((i, K - n + t, start[i] + t - 1))
    kept = sorted({p for _, _, p in wanted}) or [0]
    at = {p: u for u, p in enumerate(kept)}
    gather = [[0] * K for _ in samples]
    for i, j, p in wanted:
        gather[i][j] = at[p]
    shared = any(P for P, _ in units)
    return MicroBatch(input_ids=torch.tensor(ids, dtype=torch.long),
                      attention_mask=_block_mask(segments, prefix_of) if shared else None,
                      position_ids=torch.tensor(positions, dtype=torch.long),
                      keep_positions=torch.tensor(kept, dtype=torch.long), gather=torch.tensor(gather, dtype=torch.long),
                      tokens=sum(widths), **window)


def _rows(widths: list[int], W: int) -> list[list[int]]:
    """Unit indices per row of width W: first-fit decreasing, or a row per unit when sharing rows saves little."""
    rows: list[list[int]] = []
    room: list[int] = []
    for u in sorted(range(len(widths)), key=lambda u: -widths[u]):
        r = next((r for r, free in enumerate(room) if free >= widths[u]), None)
        if r is None:
            rows.append([])
            room.append(W)
            r = len(rows) - 1
        rows[r].append(u)
        room[r] -= widths[u]
    if len(widths) <= SHARE_ROWS_GAIN * len(rows):  # a unit per row: a row without a shared prefix needs no mask
        rows = [[u] for r in rows for u in r]
    return rows


def _prefix_units(samples: list[Sample], width: int) -> list[tuple[int, list[int]]]:
    """(shared prefix length P, member samples) units, greedily over the samples in token order.

    A prefix ends before the position that predicts its members' first loss token, so every prediction is made
    in a suffix. A sample joins the unit before it when the unit stays within `width` and sharing saves tokens:
    the shorter common prefix costs every member the tokens it no longer shares.
    """
    order = sorted(range(len(samples)), key=lambda i: samples[i].input_ids)
    units: list[tuple[int, list[int]]] = []
    for i in order:
        ids, mask = samples[i].input_ids, samples[i].loss_mask
        own = mask.index(1) - 1 if 1 in mask else 0  # the longest prefix this sample can share
        if units:
            P, members = units[-1]
            first = samples[members[0]].input_ids
            common = min(P, own, _common_prefix(first, ids))
            width_after = _unit_width(samples, common, members + [i])
            if common >= MIN_SHARED_PREFIX and width_after <= width and common > (P - common) * len(members):
                units[-1] = (common, members + [i])
                continue
        units.append((own, [i]))
    return [(P if len(members) > 1 else 0, members) for P, members in units]


def _unit_width(samples: list[Sample], P: int, members: list[int]) -> int:
    """Positions a unit takes in a row: its shared prefix once, then each member's remaining tokens."""
    return P + sum(len(samples[i].input_ids) - P for i in members)


def _common_prefix(a: list[int], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def _block_mask(segments: list[list[int]], prefix_of: list[list[int]]) -> torch.Tensor:
    """[R, 1, W, W] bool, True where query q may attend to key k: k <= q in q's own segment, or k in q's prefix."""
    seg = torch.tensor(segments, dtype=torch.long)
    pre = torch.tensor(prefix_of, dtype=torch.long)
    W = seg.shape[1]
    causal = torch.ones(W, W, dtype=torch.bool).tril()
    mask = ((seg[:, :, None] == seg[:, None, :]) & causal) | (pre[:, :, None] == seg[:, None, :])
    return mask[:, None]


def build(samples: list[Sample], pad_id: int, layout: str) -> MicroBatch:
    """The micro-batch of `samples` in `layout` (`LAYOUTS`; trainer.layout picks it)."""
    if layout == "padded":
        return collate(samples, pad_id)
    return pack(samples, pad_id, share_prefixes=layout == "shared")


LAYOUTS = ("padded", "packed", "shared")  # shared: packed, with common prefixes laid out once


def padding_sample(pad_id: int) -> Sample:
    """A row with no loss tokens: keeps collective calls in step when a process has fewer micro-batches."""
    return Sample([pad_id, pad_id], [0, 0], [0.0, 0.0], 0.0, -1, traj_tokens=1)


def mini_batches(
    samples: list[Sample], trajectories: list[int], plan: BatchPlan, rng: random.Random
) -> list[list[Sample]]:
    """Split this process's samples into `plan.mini_batches` groups by trajectory (shuffled with `rng`).

    `trajectories` lists the indices of the trajectories that train (errored ones, and tied groups
    when the loss has no KL or entropy term, are left out by the caller); each mini-batch gets an equal share of them (±1).
    """
    order = list(trajectories)
    rng.shuffle(order)
    n = plan.mini_batches
    bounds = [round(i * len(order) / n) for i in range(n + 1)]
    by_traj: dict[int, list[Sample]] = {}
    for s in samples:
        by_traj.setdefault(s.trajectory, []).append(s)
    return [[s for t in order[bounds[i]:bounds[i + 1]] for s in by_traj.get(t, [])] for i in range(n)]


def micro_batches(samples: list[Sample], rows: int, layout: str = "packed") -> list[list[Sample]]:
    """Chunks of at most `rows` samples, sorted by length so rows of similar length share padding. The shared
    layout takes them in token order instead (samples with a common prefix land in one chunk) where that reads
    `SHARE_PREFIX_GAIN` times fewer tokens; otherwise prefixes are too short to pay for the mixed lengths."""
    ordered = sorted(samples, key=lambda s: len(s.input_ids))
    if layout == "shared" and samples:
        longest = max(len(s.input_ids) for s in samples)
        tokens = sum(len(s.input_ids) for s in samples)
        read = sum(_unit_width(samples, P, members) for P, members in _prefix_units(samples, longest))
        if tokens >= SHARE_PREFIX_GAIN * read:
            ordered = sorted(samples, key=lambda s: s.input_ids)
    return [ordered[i:i + rows] for i in range(0, len(ordered), rows)]
