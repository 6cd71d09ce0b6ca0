#!/bin/sh
# fuzz/run.sh DIR — runs every libFuzzer target DIR/fuzz_* for $FUZZ_SECONDS
# (default 60) under ASan+UBSan, starting from fuzz/seeds/<target>/ plus a
# corpus kept in DIR/corpus-<target>/ (with the dictionary fuzz/<target>.dict
# when there is one), and prints one summary line per target:
#   fuzz_ptb: 1234567 execs in 60 s, no crash
# $FUZZ_JOBS targets run at once (default: one per CPU; each target is one
# process of one thread). Exits non-zero if any target crashed (the
# reproducer is left in DIR).
set -u
dir=${1:?usage: fuzz/run.sh BUILD_DIR}
secs=${FUZZ_SECONDS:-60}
jobs=${FUZZ_JOBS:-$(nproc 2>/dev/null || echo 1)}

# run_one NAME [PART]: one target; its summary line into DIR/NAME.summary
# (DIR/NAME.summary.PART and log DIR/NAME.PART.log for one of the parallel
# parts of a target)
run_one() {
  name=$1
  part=${2:+.$2}
  bin="$dir/$name"
  corpus="$dir/corpus-$name"
  mkdir -p "$corpus"
  seeds="fuzz/seeds/$name"
  [ -d "$seeds" ] || seeds=""
  dict=""
  [ -f "fuzz/$name.dict" ] && dict="-dict=fuzz/$name.dict"
  log="$dir/$name$part.log"
  echo "== $name${part:+ (part ${part#.})}: $secs s"
  "$bin" -max_total_time="$secs" -print_final_stats=1 -artifact_prefix="$dir/$name-" \
         -rss_limit_mb=2048 -timeout=10 $dict "$corpus" $seeds >"$log" 2>&1
  rc=$?
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
  if [ $rc -eq 0 ]; then
    echo "$name: ${execs:-?} execs in $secs s, no crash" >"$dir/$name.summary$part"
  else
    echo "$name: FAILED (exit $rc) after ${execs:-?} execs; see $log" >"$dir/$name.summary$part"
    tail -n 40 "$log"
  fi
}

names=""
for bin in "$dir"/fuzz_*; do
  [ -x "$bin" ] && [ -f "$bin" ] || continue
  names="$names $(basename "$bin")"
done
# deal the targets round-robin to $jobs lanes, each lane runs its own in turn;
# when the count is not a multiple of $jobs, the last round's targets
# ($left of them) are not dealt: each runs after the lanes as $jobs processes
# at once for $secs/$jobs s (rounded up) apiece, on the one corpus (libFuzzer
# shares a corpus directory between processes), so no lane idles through
# the last round and each target still gets its $secs s of fuzzing
count=0
for name in $names; do count=$((count + 1)); done
left=0
[ "$jobs" -gt 1 ] && [ "$count" -gt "$jobs" ] && left=$((count % jobs))
lane=0
while [ "$lane" -lt "$jobs" ]; do
  i=0
  mine=""
  for name in $names; do
    [ "$i" -lt $((count - left)) ] && [ $((i % jobs)) -eq "$lane" ] && mine="$mine $name"
    i=$((i + 1))
  done
  if [ -n "$mine" ]; then
    ( for name in $mine; do run_one "$name"; done ) &
  fi
  lane=$((lane + 1))
done
wait
i=0
for name in $names; do
  if [ "$i" -ge $((count - left)) ]; then
    part=$(((secs + jobs - 1) / jobs))
    lane=0
    while [ "$lane" -lt "$jobs" ]; do
      ( secs=$part run_one "$name" "$lane" ) &
      lane=$((lane + 1))
    done
    wait
    # one summary line: the parts' executions added, failed if any part did
    total=0
    bad=""
    lane=0
    while [ "$lane" -lt "$jobs" ]; do
      line=$(cat "$dir/$name.summary.$lane" 2>/dev/null || echo "$name: FAILED (no summary)")
      rm -f "$dir/$name.summary.$lane"
      case $line in
        *FAILED*) bad="$bad
$line" ;;
        *) total=$((total + $(echo "$line" | sed 's/^[^:]*: \([0-9]*\) execs.*/\1/;s/^[^0-9].*/0/'))) ;;
      esac
      lane=$((lane + 1))
    done
    if [ -n "$bad" ]; then
      echo "$name: FAILED in one of $jobs parallel parts:$bad" >"$dir/$name.summary"
    else
      echo "$name: $total execs in $jobs x $part s, no crash" >"$dir/$name.summary"
    fi
  fi
  i=$((i + 1))
done

status=0
echo "---- fuzz summary"
for name in $names; do
  if [ -f "$dir/$name.summary" ]; then
    cat "$dir/$name.summary"
    grep -q FAILED "$dir/$name.summary" && status=1
    rm -f "$dir/$name.summary"
  else
    echo "$name: FAILED (no summary)"
    status=1
  fi
done
exit $status
