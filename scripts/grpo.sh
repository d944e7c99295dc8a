#!/usr/bin/env bash
# Cost-aware GRPO on one or many GPUs through `accelerate launch`; arguments are `evoharness-rl grpo` overrides.
#
#   ACCEL=single_gpu scripts/grpo.sh env=alfworld model.path=outputs/sft/run1/merged out_dir=outputs/grpo/run1
#   ACCEL=ddp scripts/grpo.sh env=alfworld policy=vllm model.path=... out_dir=...    # 8 processes, one per GPU
#   ACCEL=ddp ACCEL_ARGS="--num_machines 2 --num_processes 16 --machine_rank 0 --main_process_ip 10.0.0.1" \
#       scripts/grpo.sh ...                                     # multi-node: run on every node (rank 0, 1, ...)
#   scripts/grpo.sh ... resume=true                             # continue the newest checkpoint in out_dir
#
# Every process rolls out its share of grpo.prompts_per_update with its own environment pool
# and rollout backend; grpo.prompts_per_update and grpo.mini_batch_trajectories must divide by
# the number of processes (the run stops at start with the arithmetic otherwise).
# ACCEL, ACCEL_ARGS, PYTHON: see scripts/launch.sh.
exec "$(dirname "${BASH_SOURCE[0]}")/launch.sh" grpo "$@"
