#!/usr/bin/env bash
# SFT on one or many GPUs through `accelerate launch`; arguments are `evoharness-rl sft` overrides.
#
#   ACCEL=single_gpu scripts/sft.sh model.path=/ckpt/Qwen3-8B sft.data=outputs/collect/run1 out_dir=outputs/sft/run1
#   ACCEL=fsdp scripts/sft.sh sft.lora=false ...                      # full-parameter, sharded over 8 GPUs
#   ACCEL=ddp ACCEL_ARGS="--num_machines 2 --num_processes 16 --machine_rank 0 --main_process_ip 10.0.0.1" \
#       scripts/sft.sh ...                                           # multi-node: run on every node (rank 0, 1, ...)
#
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
exec "$PYTHON" -m accelerate.commands.launch --config_file "$CONFIG" ${ACCEL_ARGS:-} -m evoharness_rl sft "$@"
