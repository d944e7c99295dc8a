#!/usr/bin/env bash
# `accelerate launch` an evoharness-rl command: scripts/launch.sh <command> [overrides ...]
# (scripts/sft.sh and scripts/grpo.sh call this).
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
exec "$PYTHON" -m accelerate.commands.launch --config_file "$CONFIG" ${ACCEL_ARGS:-} -m evoharness_rl "$@"
