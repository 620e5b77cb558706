#!/usr/bin/env bash
# Builds examples/downstream against an install of the build tree, the way a downstream project
# would (find_package(tierkv CONFIG)), runs it, and checks that the embedded-only program links
# neither gRPC, protobuf nor prometheus-cpp.
#   tests/downstream_test.sh <build dir> <source dir>
set -euo pipefail
build=$1
src=$2
work=$build/downstream-test
rm -rf "$work"
cmake --install "$build" --prefix "$work/prefix" >/dev/null
for variant in embedded-only full; do
  flags=()
  [[ $variant == embedded-only ]] && flags=(-Dtierkv_EMBEDDED_ONLY=ON)
  # The output only when a step fails (a quiet test otherwise).
  if ! cmake -S "$src/examples/downstream" -B "$work/$variant" -G Ninja \
    -DCMAKE_PREFIX_PATH="$work/prefix" -DCMAKE_BUILD_TYPE=Release "${flags[@]}" \
    >"$work/$variant.log" 2>&1 || ! cmake --build "$work/$variant" >>"$work/$variant.log" 2>&1; then
    cat "$work/$variant.log" >&2
    echo "downstream: the $variant build of examples/downstream failed (above)" >&2
    exit 1
  fi
done
"$work/embedded-only/downstream_embedded"
"$work/full/downstream_full"
# The link line of the embedded-only program, and what it loads.
link=$(grep -A3 'build downstream_embedded:' "$work/embedded-only/build.ninja" | grep LINK_LIBRARIES || true)
if grep -Eq 'grpc|protobuf|prometheus' <<<"$link"; then
  echo "downstream: tierkv::embedded pulls in the control plane: $link" >&2
  exit 1
fi
# ldd's output is taken whole first: under pipefail, `ldd | grep -q` fails when grep exits at its
# first match and ldd dies of SIGPIPE.
embedded_libs=$(ldd "$work/embedded-only/downstream_embedded")
full_libs=$(ldd "$work/full/downstream_full")
if grep -E 'grpc|protobuf|prometheus' <<<"$embedded_libs"; then
  echo "downstream: the embedded-only program loads the libraries above" >&2
  exit 1
fi
if ! grep -q grpc <<<"$full_libs"; then
  echo "downstream: tierkv::tierkv should link gRPC" >&2
  exit 1
fi
echo "downstream: OK (installed package; embedded-only link line has no gRPC/protobuf/prometheus)"
