#!/usr/bin/env bash
# The main job: install dependencies, build tierkv (Release, with the Python module for
# /usr/bin/python3 in build-release/python/) and run the two benches with human-readable
# output. No services to start: the benches use an embedded client (master and memory segment
# in the bench's own process).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

jobs=$(nproc)
bash scripts/install-deps.sh

echo "==> configure and build (Release, build-release/)"
cmake -G Ninja -B build-release -DCMAKE_BUILD_TYPE=Release -DPython3_EXECUTABLE=/usr/bin/python3
cmake --build build-release -j"$jobs" --target tierkv_cli

echo
echo "==> tierkv bench embedded (put/get throughput vs memcpy)"
build-release/tierkv bench embedded

echo
echo "==> tierkv bench metadata (batch_is_exist keys/s)"
build-release/tierkv bench metadata

echo
echo "==> Python module (Debian's /usr/bin/python3, docs/python.md)"
PYTHONPATH=build-release/python /usr/bin/python3 -c \
  'import tierkv; print("import tierkv OK:", tierkv.__version__, tierkv.__file__)'

echo
echo "demo: done (flags: build-release/tierkv bench embedded --help; docs/benchmarks.md)"
echo "Python: PYTHONPATH=build-release/python /usr/bin/python3 -c 'import tierkv'"
