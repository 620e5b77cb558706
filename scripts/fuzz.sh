#!/usr/bin/env bash
# Builds the libFuzzer targets of fuzz/ (one per control-plane decoder) with clang++ and
# -fsanitize=fuzzer,address,undefined in build-fuzz/, then runs each one briefly.
#
#   bash scripts/fuzz.sh                 every target, 20 s each
#   FUZZ_SECONDS=60 bash scripts/fuzz.sh req_Exists resp_Batch
#   FUZZ_JOBS=1 ...                      targets run FUZZ_JOBS at a time (default: nproc)
#   FUZZ_STEP=build / FUZZ_STEP=run      only build the targets / only run them (default: both)
#   FUZZ_UNITY=ON                        a unity build (CMAKE_UNITY_BUILD; scripts/test.sh)
#
# Each corpus starts from the target's seeds (valid messages written by the target itself) and
# is kept in build-fuzz/corpus/<target>/ between runs. A crash leaves its input in
# build-fuzz/crashes/<target>/ and the log in build-fuzz/logs/<target>.log; reproduce it with
#   build-fuzz/fuzz/fuzz_<target> build-fuzz/crashes/<target>/crash-*
# Exit status 0 only if no target crashed; the last line sums up.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

seconds=${FUZZ_SECONDS:-20}
jobs=${FUZZ_JOBS:-$(nproc)}
dir=build-fuzz
step=${FUZZ_STEP:-all}
case "$step" in
  all | build | run) ;;
  *)
    echo "fuzz.sh: FUZZ_STEP must be all, build or run (got '$step')" >&2
    exit 2
    ;;
esac

# -O1 -g1 (like scripts/test.sh's sanitizer builds), assertions on; every object file gets
# fuzzer coverage instrumentation (fuzzer-no-link), the targets link libFuzzer's main.
if [[ "$step" != run ]]; then
  cmake -G Ninja -S . -B "$dir" \
    -DCMAKE_CXX_COMPILER=clang++ \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1" \
    -DCMAKE_CXX_FLAGS=-fsanitize=fuzzer-no-link -DCMAKE_UNITY_BUILD="${FUZZ_UNITY:-OFF}" \
    -DTIERKV_SANITIZE=address -DTIERKV_FUZZ=ON -DTIERKV_BUILD_TESTS=OFF >/dev/null
  cmake --build "$dir" -j"$(nproc)" --target fuzz_all
fi
if [[ "$step" == build ]]; then
  echo "fuzz.sh: built $(grep -c . "$dir/fuzz/targets.txt") target(s) in $dir/fuzz/"
  exit 0
fi
if [[ ! -f "$dir/fuzz/targets.txt" ]]; then
  echo "fuzz.sh: $dir/ holds no built targets: run with FUZZ_STEP=build (or all) first" >&2
  exit 1
fi

if (($# > 0)); then
  targets=("$@")
else
  mapfile -t targets < <(grep -v '^$' "$dir/fuzz/targets.txt")
fi

export ASAN_OPTIONS="abort_on_error=1:detect_leaks=1"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
mkdir -p "$dir/corpus" "$dir/crashes" "$dir/logs"

run_one() {
  local name=$1 seconds=$2 dir=$3
  local bin="$dir/fuzz/fuzz_$name" corpus="$dir/corpus/$name" crashes="$dir/crashes/$name"
  mkdir -p "$corpus" "$crashes"
  TIERKV_FUZZ_WRITE_SEEDS="$corpus" "$bin" >/dev/null
  local rc=0
  "$bin" -max_total_time="$seconds" -max_len=65536 -timeout=10 -rss_limit_mb=4096 \
    -print_final_stats=1 -artifact_prefix="$crashes/" "$corpus" >"$dir/logs/$name.log" 2>&1 || rc=$?
  local runs execs_per_s cov
  runs=$(LC_ALL=C sed -n 's/^stat::number_of_executed_units: *//p' "$dir/logs/$name.log" | tail -n 1)
  execs_per_s=$(LC_ALL=C sed -n 's/^stat::average_exec_per_sec: *//p' "$dir/logs/$name.log" | tail -n 1)
  cov=$(grep -ao 'cov: [0-9]*' "$dir/logs/$name.log" | tail -n 1 | cut -d' ' -f2)
  if ((rc == 0)); then
    printf '%-24s ok     %9s runs %7s/s  cov %5s  corpus %5s\n' "$name" "${runs:-?}" \
      "${execs_per_s:-?}" "${cov:-?}" "$(find "$corpus" -type f | wc -l)"
  else
    printf '%-24s CRASH  (exit %d) see %s/logs/%s.log, input in %s\n' "$name" "$rc" "$dir" \
      "$name" "$crashes"
    # The report (stack, reproducer) for CI logs, which keep stdout/stderr only.
    tail -n 60 "$dir/logs/$name.log" | sed "s/^/  [$name] /" >&2
    return 1
  fi
}
export -f run_one

echo "fuzz.sh: ${#targets[@]} target(s), ${seconds} s each, ${jobs} at a time"
failed=0
printf '%s\n' "${targets[@]}" | xargs -P "$jobs" -I{} bash -c 'run_one "$@"' _ {} "$seconds" "$dir" ||
  failed=1
if ((failed)); then
  echo "fuzz.sh: FAILED: a target crashed (see above)" >&2
  exit 1
fi
echo "fuzz.sh: ALL PASSED: ${#targets[@]} target(s), no crash"
