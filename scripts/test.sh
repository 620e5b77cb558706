#!/usr/bin/env bash
# Builds tierkv and runs every test, stopping at the first failure:
#   0. clang-format check of every C++ file, and the layer order of the includes
#      (scripts/check-layers.sh).
#   1. Release (-O3, as scripts/demo.sh builds) build in build/: the whole ctest suite, then a
#      smoke run of `tierkv bench embedded --json` whose summary line must parse.
#   2. ASan+UBSan build in build-asan/: the whole ctest suite.
#   3. TSan build in build-tsan/: the concurrency tests (ctest -L concurrency).
#   4. libFuzzer build in build-fuzz/ (clang, scripts/fuzz.sh): every target for 2 s.
# Exit status 0 only if everything passed; the last line says what ran.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

jobs=$(nproc)
started=$SECONDS
step="install dependencies"
summary=()

elapsed() { printf '%dm%02ds' $(((SECONDS - started) / 60)) $(((SECONDS - started) % 60)); }
on_exit() {
  local rc=$?
  if ((rc != 0)); then
    echo "test.sh: FAILED at step '$step' (exit $rc) after $(elapsed)" >&2
  fi
}
trap on_exit EXIT
begin() {
  step="$1"
  echo
  echo "==> [$(elapsed)] $step"
}
# Number of tests ctest would run with the given filter arguments.
count_tests() { ctest --test-dir "$1" -N "${@:2}" | sed -n 's/^Total Tests: //p'; }

# Sanitizer builds: line tables only (-g1) still symbolize stacks to file:line; leaving out
# -DNDEBUG keeps assertions on. TSan at -O1 (its runtime cost at -O0 is too high).
tsan_flags=(-DCMAKE_BUILD_TYPE=RelWithDebInfo "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1")

export ASAN_OPTIONS="abort_on_error=1:detect_leaks=1:strict_string_checks=1"
export UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1"
export TSAN_OPTIONS="halt_on_error=1:second_deadlock_stack=1"
# UCX (linked into libtierkv for the network transport) hooks mmap/madvise through libucm for
# its memory-registration cache; those hooks crash under TSan's interceptors (a SIGSEGV in
# __tsan::MutexPreReadLock under ucm_madvise when a thread starts). The TSan step runs with
# UCX memory events off (no RDMA registration cache needed by these tests).

bash scripts/install-deps.sh

begin "format and layer check (clang-format, scripts/check-layers.sh)"
mapfile -t sources < <(git ls-files '*.cc' '*.h' 2>/dev/null || find include src tools tests bench -name '*.cc' -o -name '*.h')
clang-format --dry-run --Werror "${sources[@]}"
bash scripts/check-layers.sh
summary+=("format")

# ---- 1. normal build ---------------------------------------------------------
# -O3 as in the demo's Release build (it raises warnings -O2 does not), with line tables only
# (-g1: a third less compile time than -g); the test code itself at -O1 (tests/CMakeLists.txt).
begin "build (Release -O3 -g1, build/)"
cmake -G Ninja -B build -DCMAKE_BUILD_TYPE=Release "-DCMAKE_CXX_FLAGS_RELEASE=-O3 -g1 -DNDEBUG" \
  -DTIERKV_TEST_CXX_FLAGS=-O1 -DTIERKV_SANITIZE=
cmake --build build -j"$jobs"

begin "ctest (build/)"
ctest --test-dir build --output-on-failure --no-tests=error -j"$jobs"
summary+=("normal: $(count_tests build) tests")

begin "CLI smoke: tierkv bench embedded --json --working-set 64MiB --reps 1"
smoke_out=$(build/tierkv bench embedded --json --working-set 64MiB --reps 1 2>build/smoke.stderr) || {
  cat build/smoke.stderr >&2
  exit 1
}
printf '%s\n' "$smoke_out"
printf '%s\n' "$smoke_out" | tail -n 1 | python3 -c '
import json, sys
line = json.loads(sys.stdin.read())
keys = ("get_gbps", "put_gbps", "memcpy_gbps", "get_ratio", "put_ratio")
assert line.get("bench") == "embedded", line
for key in keys:
    assert isinstance(line.get(key), (int, float)) and line[key] > 0, (key, line)
print("summary line OK: get_ratio=%.3f put_ratio=%.3f" % (line["get_ratio"], line["put_ratio"]))
'
summary+=("CLI smoke")

# ---- 2. ASan + UBSan ---------------------------------------------------------
begin "build (ASan+UBSan, build-asan/)"
# ASan's instrumentation makes optimised compiles slow: the library at -Og (a third faster to
# compile than -O1, still optimised enough that the suite runs in about a minute and a half),
# the test code at -O0 (-O1 triples its compile time).
cmake -G Ninja -B build-asan -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-Og -g1" -DTIERKV_SANITIZE=address -DTIERKV_TEST_CXX_FLAGS=-O0
cmake --build build-asan -j"$jobs"

begin "ctest (build-asan/)"
ctest --test-dir build-asan --output-on-failure --no-tests=error -j"$jobs"
summary+=("asan+ubsan: $(count_tests build-asan) tests")

# ---- 3. TSan -------------------------------------------------------------------
# TSan aborts with "unexpected memory mapping" on kernels whose mmap randomisation
# collides with its shadow layout; running with ASLR off (setarch -R) avoids it.
# Probe with a tiny program first, since the build itself runs the test binary
# (test discovery).
begin "build (TSan, build-tsan/)"
tsan_prefix=()
probe_dir=$(mktemp -d)
printf '#include <thread>\nint main() { std::thread t([] {}); t.join(); }\n' >"$probe_dir/probe.cc"
c++ -std=c++20 -fsanitize=thread "$probe_dir/probe.cc" -o "$probe_dir/probe"
if ! "$probe_dir/probe" >"$probe_dir/out" 2>&1; then
  if grep -q "unexpected memory mapping" "$probe_dir/out" &&
    setarch "$(uname -m)" -R "$probe_dir/probe"; then
    echo "TSan needs ASLR off on this kernel: running under setarch -R"
    tsan_prefix=(setarch "$(uname -m)" -R)
  else
    cat "$probe_dir/out" >&2
    echo "test.sh: a trivial TSan program fails on this machine" >&2
    exit 1
  fi
fi
rm -rf "$probe_dir"
cmake -G Ninja -B build-tsan "${tsan_flags[@]}" -DTIERKV_SANITIZE=thread
UCX_MEM_EVENTS=no "${tsan_prefix[@]}" cmake --build build-tsan -j"$jobs" --target tierkv_stress_tests

begin "ctest -L concurrency (build-tsan/)"
UCX_MEM_EVENTS=no "${tsan_prefix[@]}" ctest --test-dir build-tsan -L concurrency --output-on-failure \
  --no-tests=error -j"$jobs"
summary+=("tsan: $(count_tests build-tsan -L concurrency) concurrency tests")

# ---- 4. libFuzzer --------------------------------------------------------------
# A short run of every fuzz target (one per control-plane decoder): it catches a decoder that
# crashes on its seeds or on inputs a few mutations away. scripts/fuzz.sh builds only the
# control plane the targets reach (fuzz/CMakeLists.txt), so this step adds about a minute and a
# half on 2 cores; a crash fails it and prints the report. Real fuzzing: scripts/fuzz.sh alone.
fuzz_seconds=2
begin "fuzz (libFuzzer, build-fuzz/: every target for ${fuzz_seconds} s)"
FUZZ_SECONDS=$fuzz_seconds FUZZ_JOBS=$jobs bash scripts/fuzz.sh
summary+=("fuzz: $(grep -c . build-fuzz/fuzz/targets.txt) targets x ${fuzz_seconds} s")

step="done"
printf -v joined '%s; ' "${summary[@]}"
echo
echo "test.sh: ALL PASSED in $(elapsed): ${joined%; }"
