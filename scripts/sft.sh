#!/usr/bin/env bash
# SFT on one or many GPUs through `accelerate launch`; arguments are `evoharness-rl sft` overrides.
#
#   ACCEL=single_gpu scripts/sft.sh model.path=/ckpt/Qwen3-8B sft.data=outputs/collect/run1 out_dir=outputs/sft/run1
#   ACCEL=fsdp scripts/sft.sh sft.lora=false ...                      # full-parameter, sharded over 8 GPUs
#   ACCEL=ddp ACCEL_ARGS="--num_machines 2 --num_processes 16 --machine_rank 0 --main_process_ip 10.0.0.1" \
#       scripts/sft.sh ...                                           # multi-node: run on every node (rank 0, 1, ...)
#
# ACCEL, ACCEL_ARGS, PYTHON: see scripts/launch.sh.
exec "$(dirname "${BASH_SOURCE[0]}")/launch.sh" sft "$@"
