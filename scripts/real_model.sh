#!/usr/bin/env bash
# A real pretrained instruct model through the pipeline (README, "A real model").
#
#   scripts/real_model.sh scaffold   # zero-shot inference scaffold: env_only (ReAct) / always_on (Base) / adaptive,
#                                    # on ALFWorld and WebShop, paper prompts -> $D/scaffold.md
#   scripts/real_model.sh sft        # scripted-teacher traces -> LoRA SFT (r 64, alpha 128) -> merged checkpoint,
#                                    # and the tiny from-scratch model on the same traces; greedy eval of both on
#                                    # valid_seen / valid_unseen -> $D/sft.md
#   scripts/real_model.sh grpo       # LoRA GRPO on the 3-target `choice` task (experiment=real_model_choice), once
#                                    # with vLLM rollouts (adapter synced after every update) and once with the hf
#                                    # backend -> $G/report.json and $G/grpo.md (G: GRPO_DIR, outputs/real_model/grpo)
#
# MODEL (default models/smollm2) is imported first when missing (`init-model source=smollm2-135m-instruct`);
# point MODEL at any HF checkpoint directory with a chat template to run the same on another model.
# Sizes default to what 2 CPU cores finish in minutes; raise them where there is more compute:
#   LIMIT tasks per split, STEPS step budget, TOKENS new tokens per turn, POLICY hf | vllm,
#   SFT_GAMES train games collected, SFT_STEPS optimizer steps of the real model's LoRA SFT,
#   EVAL_STEPS step budget of the SFT evaluations;
#   grpo: BACKENDS (default "vllm hf"), WARM_STEPS supervised steps of the response format with random colours before
#   GRPO (0: start from MODEL as it is), WARM_LR their learning rate.
# Stages whose output exists are skipped (an interrupted run resumes); extra Hydra overrides: "$@".
set -euo pipefail
cd "$(dirname "$0")/.."
what=${1:?usage: scripts/real_model.sh scaffold|sft|grpo [overrides]}
shift
D=${REAL_DIR:-outputs/real}
MODEL=${MODEL:-models/smollm2}
LIMIT=${LIMIT:-4}
STEPS=${STEPS:-8}
TOKENS=${TOKENS:-64}
POLICY=${POLICY:-hf}
PY=.venv/bin/python
CLI=("$PY" -m evoharness_rl)
start=$SECONDS
stage() { printf '\n=== [%4ds] %s\n' $((SECONDS - start)) "$*"; }

[ -f "$MODEL/config.json" ] || "${CLI[@]}" init-model source=smollm2-135m-instruct "out=$MODEL" "out_dir=$D/init-model"

if [ "$what" = scaffold ]; then
  stage "prepare small ALFWorld games and a WebShop catalogue"
  "${CLI[@]}" prepare env=alfworld "env.data_dir=$D/data" env.alfworld.train_games=240 env.alfworld.valid_seen_games=24 \
    env.alfworld.valid_unseen_games=24 "out_dir=$D/prepare-alfworld" > /dev/null
  "${CLI[@]}" prepare env=webshop "env.data_dir=$D/data" env.webshop.num_products=500 env.webshop.num_goals=200 \
    env.webshop.test_goals=50 "out_dir=$D/prepare-webshop" > /dev/null
  runs=()
  for env in alfworld webshop; do
    split=valid_seen; extra=(env.alfworld.train_games=240 env.alfworld.valid_seen_games=24 env.alfworld.valid_unseen_games=24)
    [ "$env" = webshop ] && split=test && extra=(env.webshop.num_products=500 env.webshop.num_goals=200 env.webshop.test_goals=50)
    for mode in env_only always_on adaptive; do
      out="$D/scaffold_${env}_${mode}"
      runs+=("$out")
      [ -f "$out/summary.json" ] && continue
      stage "zero-shot $env, harness.mode=$mode ($LIMIT tasks, $STEPS steps, policy=$POLICY)"
      "${CLI[@]}" eval "env=$env" "env.data_dir=$D/data" "${extra[@]}" "model.path=$MODEL" "policy=$POLICY" \
        "harness.mode=$mode" "split=$split" "limit=$LIMIT" "env.max_steps_eval=$STEPS" "policy.max_new_tokens=$TOKENS" \
        env.num_workers=1 logger.progress=false "out_dir=$out" "$@" > "$out.log" 2>&1
    done
  done
  "$PY" scripts/real_model_table.py scaffold "${runs[@]}" | tee "$D/scaffold.md"
elif [ "$what" = sft ]; then
  SFT_GAMES=${SFT_GAMES:-240}
  SFT_STEPS=${SFT_STEPS:-60}
  EVAL_STEPS=${EVAL_STEPS:-30}
  DATA=(env=alfworld "env.data_dir=$D/data" env.alfworld.train_games=240 env.alfworld.valid_seen_games=24
        env.alfworld.valid_unseen_games=24 env.prompt_style=compact)
  stage "prepare ALFWorld games"
  "${CLI[@]}" prepare "${DATA[@]}" "out_dir=$D/prepare-alfworld" > /dev/null
  stage "collect scripted-teacher traces ($SFT_GAMES train games, compact prompts, as the demo)"
  [ -f "$D/collect/summary.json" ] || "${CLI[@]}" collect "${DATA[@]}" policy=scripted split=train "limit=$SFT_GAMES" \
    policy.teacher_slip_rate=0.2 env.max_steps_train=30 env.max_steps_eval=30 logger.progress=false \
    "out_dir=$D/collect" "$@"
  stage "LoRA SFT of $MODEL (r 64, alpha 128, $SFT_STEPS steps)"
  [ -f "$D/sft_real/merged/config.json" ] || "${CLI[@]}" sft "${DATA[@]}" "model.path=$MODEL" "sft.data=$D/collect" \
    sft=default sft.learning_rate=2e-4 "sft.epochs=1" sft.per_device_batch_size=4 sft.max_seq_length=1024 \
    sft.logging_steps=5 sft.save_steps=20 "sft.max_steps=$SFT_STEPS" logger.progress=false "out_dir=$D/sft_real" \
    resume=true "$@"
  stage "full-parameter SFT of the tiny from-scratch model on the same traces (the demo's recipe)"
  [ -f "$D/tiny/config.json" ] || "${CLI[@]}" init-model size=tiny "out=$D/tiny" "out_dir=$D/init-tiny"
  [ -f "$D/sft_tiny/merged/config.json" ] || "${CLI[@]}" sft "${DATA[@]}" "model.path=$D/tiny" "sft.data=$D/collect" \
    sft=full sft.learning_rate=2e-3 sft.epochs=3 sft.per_device_batch_size=8 sft.max_seq_length=2048 \
    logger.progress=false "out_dir=$D/sft_tiny" resume=true "$@"
  runs=()
  for name in real tiny; do
    for split in valid_seen valid_unseen; do
      out="$D/eval_sft_${name}_${split}"
      runs+=("$out")
      [ -f "$out/summary.json" ] && continue
      stage "greedy eval: $name SFT on $split ($LIMIT tasks)"
      "${CLI[@]}" eval "${DATA[@]}" "model.path=$D/sft_${name}/merged" "policy=$POLICY" "split=$split" "limit=$LIMIT" \
        "env.max_steps_eval=$EVAL_STEPS" policy.max_new_tokens=64 env.num_workers=1 logger.progress=false "out_dir=$out" "$@" \
        > "$out.log" 2>&1
    done
  done
  "$PY" scripts/real_model_table.py sft "${runs[@]}" | tee "$D/sft.md"
elif [ "$what" = grpo ]; then
  G=${GRPO_DIR:-outputs/real_model/grpo}
  BACKENDS=${BACKENDS:-vllm hf}
  WARM_STEPS=${WARM_STEPS:-10}
  WARM_LR=${WARM_LR:-1e-4}
  mkdir -p "$G"
  START=$MODEL
  if [ "$WARM_STEPS" -gt 0 ]; then
    START=$G/warm
    stage "format warm start: $WARM_STEPS steps of <action>press COLOUR</action> with random colours (lr $WARM_LR)"
    [ -f "$START/warm.json" ] || "$PY" -m evoharness_rl.envs.choice.warm "$MODEL" "$START" --steps "$WARM_STEPS" \
      --lr "$WARM_LR" > "$G/warm.log" 2>&1
  fi
  runs=()
  for backend in $BACKENDS; do
    out="$G/$backend"
    runs+=("$out")
    [ -f "$out/final/config.json" ] && continue
    lora=true
    [ "$backend" = hf ] && lora=false  # the hf backend generates with the trainer's own LoRA model: nothing to sync
    stage "LoRA GRPO of $START on choice, policy=$backend (experiment=real_model_choice)"
    t0=$SECONDS
    "${CLI[@]}" grpo experiment=real_model_choice "model.path=$START" "policy.backend=$backend" \
      "policy.enable_lora=$lora" "out_dir=$out" overwrite=true "$@" > "$out.log" 2>&1
    echo $((SECONDS - t0)) > "$out.seconds"
  done
  "$PY" scripts/real_model_table.py grpo "${runs[@]}" --json "$G/report.json" | tee "$G/grpo.md"
else
  echo "unknown stage $what (scaffold | sft | grpo)" >&2
  exit 2
fi
printf '\nfinished in %d s\n' $((SECONDS - start))
