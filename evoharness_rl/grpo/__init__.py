"""Cost-aware GRPO (`evoharness-rl grpo`).

    core.py        horizon curriculum, group and step advantages, policy loss (pure; the reward: evoharness_rl/reward.py)
    estimators.py  advantage estimators by name (grpo.advantage_estimator; register_adv_est adds one)
    batch.py       trajectories -> samples -> left-padded micro-batches; batch sizes and their units
    policy.py      the trained policy, the frozen SFT reference, token logprobs of a micro-batch
    sampler.py     the seeded, resumable stream of train tasks
    build.py       setup(cfg): everything a run holds (policy, reference, optimizer, engine, bank)
    trainer.py     run_grpo: the update loop (paper Algorithm 1), distributed through accelerate
    metrics.py     what each update logs
    checkpoint.py  atomic checkpoints and resume
"""
