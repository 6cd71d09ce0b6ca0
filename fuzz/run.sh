#!/bin/sh
# fuzz/run.sh DIR — runs every libFuzzer target DIR/fuzz_* for $FUZZ_SECONDS
# (default 60) under ASan+UBSan, starting from fuzz/seeds/<target>/ plus a
# corpus kept in DIR/corpus-<target>/, and prints one summary line per target:
#   fuzz_ptb: 1234567 execs in 60 s, no crash
# Exits non-zero if any target crashed (the reproducer is left in DIR).
set -u
dir=${1:?usage: fuzz/run.sh BUILD_DIR}
secs=${FUZZ_SECONDS:-60}
status=0
summary=""
for bin in "$dir"/fuzz_*; do
  [ -x "$bin" ] || continue
  name=$(basename "$bin")
  corpus="$dir/corpus-$name"
  mkdir -p "$corpus"
  seeds="fuzz/seeds/$name"
  [ -d "$seeds" ] || seeds=""
  log="$dir/$name.log"
  echo "== $name: $secs s"
  "$bin" -max_total_time="$secs" -print_final_stats=1 -artifact_prefix="$dir/$name-" \
         -rss_limit_mb=2048 -timeout=10 "$corpus" $seeds >"$log" 2>&1
  rc=$?
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
  if [ $rc -eq 0 ]; then
    line="$name: ${execs:-?} execs in $secs s, no crash"
  else
    line="$name: FAILED (exit $rc) after ${execs:-?} execs; see $log"
    tail -n 40 "$log"
    status=1
  fi
  echo "$line"
  summary="$summary$line
"
done
echo "---- fuzz summary"
printf "%s" "$summary"
exit $status
