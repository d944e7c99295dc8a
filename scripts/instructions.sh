#!/usr/bin/env bash
# Stripped instructions (paper Table 9): does the trained policy still use the harness when the system prompt no
# longer explains it? Greedy evaluation of one checkpoint on both validation splits with the full system prompt and
# with env.prompt_variant=stripped (the harness-usage instructions removed; the four verbs stay valid actions), then
# `report` (success per family, harness calls and invalid actions per episode, cost) and `view` over the four runs.
#
#   scripts/instructions.sh                                   # the demo's GRPO checkpoint (run `make demo` first)
#   MODEL=runs/grpo/final OUT=runs/instructions scripts/instructions.sh experiment=demo env.data_dir=...
#
# MODEL (default $DEMO_DIR/grpo/final), OUT (default $DEMO_DIR/instructions); extra Hydra overrides ("$@") go to
# every evaluation (default: the demo's settings). Finished evaluations are skipped, so a re-run resumes.
set -euo pipefail
cd "$(dirname "$0")/.."
D=${DEMO_DIR:-outputs/demo}
MODEL=${MODEL:-$D/grpo/final}
OUT=${OUT:-$D/instructions}
PY=.venv/bin/python
CLI=("$PY" -m evoharness_rl)
if [ $# -eq 0 ]; then set -- experiment=demo "env.data_dir=$D/data"; fi
[ -f "$MODEL/config.json" ] || { echo "error: no checkpoint at $MODEL (run make demo, or set MODEL=DIR)" >&2; exit 1; }
mkdir -p "$OUT"
runs=()
for variant in full stripped; do
  pids=()
  for split in valid_seen valid_unseen; do
    dir="$OUT/${variant}_${split}"
    runs+=("$dir")
    [ -f "$dir/summary.json" ] && continue
    # one core each, both splits side by side (a small model gains nothing from a second thread)
    OMP_NUM_THREADS=1 "${CLI[@]}" eval "$@" "model.path=$MODEL" policy=hf "split=$split" \
      "env.prompt_variant=$variant" env.num_workers=1 logger.progress=false "out_dir=$dir" > "$dir.log" 2>&1 &
    pids+=($!)
  done
  for pid in "${pids[@]}"; do wait "$pid" || { echo "eval failed; see $OUT/${variant}_*.log" >&2; exit 1; }; done
done
list=$(IFS=,; echo "${runs[*]}")
"${CLI[@]}" report "runs=[$list]" "out_dir=$OUT/report"
"${CLI[@]}" view "runs=[$list]" "out_dir=$OUT/site" > /dev/null
echo "report: $OUT/report/report.md; site: $OUT/site/index.html"
