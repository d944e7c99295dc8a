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
# ACCEL: single_gpu | ddp | fsdp | deepspeed_zero3 (configs/accelerate/<ACCEL>.yaml); default single_gpu.
# ACCEL_ARGS: extra `accelerate launch` flags that override the config file (e.g. --num_processes 4).
# PYTHON: the interpreter (default: .venv/bin/python when present, else python).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
ACCEL="${ACCEL:-single_gpu}"
CONFIG="$ROOT/configs/accelerate/$ACCEL.yaml"
if [[ ! -f "$CONFIG" ]]; then
  echo "ACCEL=$ACCEL has no config $CONFIG; choose one of: $(cd "$ROOT/configs/accelerate" && ls *.yaml | sed 's/\.yaml$//' | tr '\n' ' ')" >&2
  exit 2
fi
PYTHON="${PYTHON:-$([[ -x "$ROOT/.venv/bin/python" ]] && echo "$ROOT/.venv/bin/python" || echo python)}"

# shellcheck disable=SC2086  # ACCEL_ARGS is a list of flags
exec "$PYTHON" -m accelerate.commands.launch --config_file "$CONFIG" ${ACCEL_ARGS:-} -m evoharness_rl grpo "$@"
