#!/usr/bin/env bash
# `experiment=learning`: the paper's learning-dynamics study at demo scale (configs/experiment/learning.yaml).
#
# From the demo's SFT checkpoint (run `make demo` first), GRPO twice with the same seed and budget:
# harness.mode=adaptive (the BPE verbs) and harness.mode=env_only (vanilla GRPO, no harness), stratified
# greedy validation every grpo.eval_every updates; then `evoharness-rl report` draws the dynamics figures
# (validation success, harness calls by verb, episode length, Experience operations per cycle) and the
# updates-to-threshold table into outputs/learning/report/.
#
#   scripts/learning.sh                    # seed 0
#   SEEDS="0 1 2" scripts/learning.sh      # three seeds: one run per mode and seed, all in one report
# LEARNING_DIR (default outputs/learning), DEMO_DIR (outputs/demo) and extra Hydra overrides ("$@") apply.
set -euo pipefail
cd "$(dirname "$0")/.."
D=${DEMO_DIR:-outputs/demo}
L=${LEARNING_DIR:-outputs/learning}
SEEDS=${SEEDS:-0}
CLI=(.venv/bin/python -m evoharness_rl)
[ -f "$D/sft/merged/config.json" ] || { echo "no SFT checkpoint at $D/sft/merged; run \`make demo\` first" >&2; exit 1; }
start=$SECONDS
runs=()
for seed in $SEEDS; do
  # The two modes side by side, one core each (GRPO on this model uses one thread); logs in $L/<run>.log.
  pids=()
  for mode in adaptive env_only; do
    out="$L/${mode}_seed$seed"
    runs+=("$out")
    [ -f "$out/final/config.json" ] && continue
    printf '\n=== [%4ds] GRPO harness.mode=%s seed=%s -> %s\n' $((SECONDS - start)) "$mode" "$seed" "$out"
    mkdir -p "$L"
    OMP_NUM_THREADS=1 "${CLI[@]}" grpo experiment=learning "env.data_dir=$D/data" \
      "model.path=$D/sft/merged" policy=hf "experience.bank=$D/collect/bank.json" "harness.mode=$mode" "seed=$seed" \
      "out_dir=$out" resume=true logger.progress=false "$@" > "$L/${mode}_seed$seed.log" 2>&1 &
    pids+=($!)
  done
  for pid in "${pids[@]}"; do wait "$pid" || { echo "a GRPO run failed; see $L/*_seed$seed.log" >&2; exit 1; }; done
done
"${CLI[@]}" report "runs=[$(IFS=,; echo "${runs[*]}")]" "out_dir=$L/report" > /dev/null
printf '\nLearning study finished in %d s. Report: %s/report/report.md (dynamics.png)\n' $((SECONDS - start)) "$L"
