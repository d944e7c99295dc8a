#!/usr/bin/env bash
# Schedule ablations (paper Table 7): is it the timing of the trained policy's harness calls that matters, or only
# their number? Greedy evaluation of one checkpoint with its own harness calls replaced by each control schedule
# (timing_shuffle, type_shuffle, frequency_matched; docs/ablations.md) built from an unmodified evaluation of the same
# checkpoint on the same split (SOURCE), one after the other, then `report` over the source and the three controls.
#
#   scripts/schedules.sh                                    # the demo's GRPO checkpoint (run `make demo` first)
#   MODEL=runs/grpo/final SOURCE=runs/eval_seen OUT=runs/schedules scripts/schedules.sh experiment=demo env.data_dir=...
#
# MODEL (default $DEMO_DIR/grpo/final; its bank.json is the frozen bank), SOURCE (default
# $DEMO_DIR/eval_grpo_evolved_valid_seen), SPLIT (default valid_seen; the source's split), OUT (default
# $DEMO_DIR/schedules); extra Hydra overrides ("$@") go to every evaluation (default: the demo's settings).
# Finished evaluations are skipped, so a re-run resumes.
set -euo pipefail
cd "$(dirname "$0")/.."
D=${DEMO_DIR:-outputs/demo}
MODEL=${MODEL:-$D/grpo/final}
SOURCE=${SOURCE:-$D/eval_grpo_evolved_valid_seen}
SPLIT=${SPLIT:-valid_seen}
OUT=${OUT:-$D/schedules}
PY=.venv/bin/python
CLI=("$PY" -m evoharness_rl)
if [ $# -eq 0 ]; then set -- experiment=demo "env.data_dir=$D/data"; fi
[ -f "$MODEL/config.json" ] || { echo "error: no checkpoint at $MODEL (run make demo, or set MODEL=DIR)" >&2; exit 1; }
[ -f "$SOURCE/summary.json" ] || { echo "error: no unmodified eval at $SOURCE (set SOURCE=DIR)" >&2; exit 1; }
bank=()
[ -f "$MODEL/bank.json" ] && bank=("experience.bank=$MODEL/bank.json")
mkdir -p "$OUT"
runs=("$SOURCE")
for kind in timing_shuffle type_shuffle frequency_matched; do
  dir="$OUT/${kind}_${SPLIT}"
  runs+=("$dir")
  [ -f "$dir/summary.json" ] && continue
  OMP_NUM_THREADS=1 "${CLI[@]}" eval "$@" "model.path=$MODEL" "${bank[@]}" policy=hf "split=$SPLIT" \
    "harness.schedule=$kind" "harness.schedule_source=$SOURCE" env.num_workers=1 logger.progress=false \
    "out_dir=$dir" > "$dir.log" 2>&1 || { echo "eval failed; see $dir.log" >&2; exit 1; }
done
list=$(IFS=,; echo "${runs[*]}")
"${CLI[@]}" report "runs=[$list]" "out_dir=$OUT/report"
echo "report: $OUT/report/report.md"
