#!/usr/bin/env bash
# `make demo`: the main job end to end on the embedded default (configs/experiment/demo.yaml).
#
#   1. prepare   generated ALFWorld games (train / valid_seen / valid_unseen) on the real engine
#   2. init-model a small local tokenizer + Qwen3-architecture model
#   3. collect   scripted-teacher traces with the BPE interface (successful episodes only)
#   4. sft       full-parameter SFT from scratch, merged checkpoint
#   5. grpo      a few cost-aware GRPO updates with Experience consolidation between batches
#   6. eval      SFT and RL checkpoints on valid_seen and valid_unseen (greedy)
#   7. report    a Table-1/Table-3-style Markdown table and plots
#
# Stages whose output already exists are skipped, so an interrupted demo resumes.
# DEMO_DIR (default outputs/demo) and extra Hydra overrides ("$@") are passed to every stage.
set -euo pipefail
cd "$(dirname "$0")/.."
D=${DEMO_DIR:-outputs/demo}
SIZE=${DEMO_MODEL_SIZE:-tiny}
CLI=(.venv/bin/python -m evoharness_rl)
COMMON=(experiment=demo "env.data_dir=$D/data" "$@")
EVAL_LIMIT=${DEMO_EVAL_LIMIT:-36}
start=$SECONDS

stage() { printf '\n=== [%3ds] %s\n' $((SECONDS - start)) "$*"; }

stage "prepare ALFWorld games"
"${CLI[@]}" prepare "${COMMON[@]}" "out_dir=$D/prepare"

stage "build a $SIZE local model"
[ -f "$D/model/config.json" ] || "${CLI[@]}" init-model "size=$SIZE" "out=$D/model" "out_dir=$D/init-model"

stage "collect scripted-teacher traces (adaptive BPE use)"
[ -f "$D/collect/summary.json" ] || "${CLI[@]}" collect "${COMMON[@]}" policy=scripted split=train "out_dir=$D/collect"

stage "SFT (full-parameter, from scratch)"
[ -f "$D/sft/merged/config.json" ] || "${CLI[@]}" sft "${COMMON[@]}" "model.path=$D/model" "sft.data=$D/collect" \
  "out_dir=$D/sft" resume=true

stage "GRPO from the SFT checkpoint"
[ -f "$D/grpo/final/config.json" ] || OMP_NUM_THREADS=1 "${CLI[@]}" grpo "${COMMON[@]}" "model.path=$D/sft/merged" policy=hf \
  "out_dir=$D/grpo" resume=true

# The two splits are evaluated side by side, one core each (a small model gains nothing from a second thread).
for ckpt in sft grpo; do
  model="$D/$ckpt/merged"; [ "$ckpt" = grpo ] && model="$D/grpo/final"
  bank=null; [ "$ckpt" = grpo ] && bank="$D/grpo/final/bank.json"
  stage "eval $ckpt on valid_seen and valid_unseen (greedy, first $EVAL_LIMIT tasks of each)"
  pids=()
  for split in valid_seen valid_unseen; do
    OMP_NUM_THREADS=1 "${CLI[@]}" eval "${COMMON[@]}" "model.path=$model" policy=hf policy.temperature=0 \
      "split=$split" "limit=$EVAL_LIMIT" "experience.bank=$bank" env.num_workers=1 logger.progress=false \
      "out_dir=$D/eval_${ckpt}_${split}" > "$D/eval_${ckpt}_${split}.log" 2>&1 &
    pids+=($!)
  done
  for pid in "${pids[@]}"; do wait "$pid" || { echo "eval failed; see $D/eval_${ckpt}_*.log" >&2; exit 1; }; done
done

stage "report"
"${CLI[@]}" report "runs=[$D/eval_sft_valid_seen,$D/eval_sft_valid_unseen,$D/eval_grpo_valid_seen,$D/eval_grpo_valid_unseen,$D/grpo]" \
  "out_dir=$D/report"
printf '\nDemo finished in %d s. Table: %s/report/report.md\n' $((SECONDS - start)) "$D"
