# Job helpers shared by scripts/demo.sh and scripts/diagnostics.sh (source it; needs $D, the run folder).
#
# Every job runs on one thread, at most two at a time (one per core): a model this small gains little from a
# second thread, and two OpenMP threads collapse (8x slower, measured) as soon as anything else wants a core.
# Logs: $D/logs/<job>.log; a failed job leaves $D/logs/<job>.failed.
start=${start:-$SECONDS}
MAX_JOBS=${MAX_JOBS:-2}

stage() { printf '\n=== [%4ds] %s\n' $((SECONDS - start)) "$*"; }

# job <name> <command...>: run it with its output in $D/logs/<name>.log; a failure leaves <name>.failed.
job() {
  local name=$1; shift
  if ! OMP_NUM_THREADS=1 "$@" > "$D/logs/$name.log" 2>&1; then
    echo "$name failed; see $D/logs/$name.log" >&2
    touch "$D/logs/$name.failed"
  fi
}

# launch <name> <command...>: start a job in the background once one of the MAX_JOBS slots is free.
launch() {
  while (( $(jobs -rp | wc -l) >= MAX_JOBS )); do wait -n || true; done
  stage "start $1 (log: $D/logs/$1.log)"
  job "$@" &
}

# after <file> <job>: wait (running jobs go on) until <job> has written <file>; stop if it failed. So a job can
# start as soon as the one it needs is done, while the others still run.
after() {
  while [ ! -f "$1" ]; do
    if [ -z "$(jobs -rp)" ] && [ ! -f "$1" ]; then  # (checked again: the job may have written it just now)
      [ -f "$D/logs/$2.failed" ] || echo "$2 finished without writing $1" >&2
      finished
      exit 1
    fi
    wait -n || true
  done
}

# finished: wait for every running job; stop if one failed.
finished() {
  wait
  if compgen -G "$D/logs/*.failed" > /dev/null; then exit 1; fi
}

mkdir -p "$D/logs"
rm -f "$D"/logs/*.failed
