#!/usr/bin/env bash
# The GPU check (docs/scale.md): run as is on a GPU machine that has this project copied to it and torch,
# transformers and accelerate installed (peft, trl, vllm, deepspeed are used when importable; no network).
# About 8 minutes on one H200. Writes one JSON ($OUT/gpu_check.json, else outputs/gpu_check.json, or --out PATH)
# and prints a table, including what it skipped and why.
#
#   bash scripts/gpu_check.sh                    # Qwen3-0.6B and Qwen3-1.7B shapes, batch 8 x 2048, bf16
#   bash scripts/gpu_check.sh --out /tmp/g.json --skip vllm
#   bash scripts/gpu_check.sh --tiny --device cpu   # tiny shapes on CPU: what the tests run
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ -n "${PYTHON:-}" ]]; then py="$PYTHON"
elif [[ -x .venv/bin/python ]]; then py=.venv/bin/python
else py=python3
fi
export TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
exec "$py" scripts/gpu_check.py "$@"
