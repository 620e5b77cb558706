#!/usr/bin/env bash
# Installs the Debian packages tierkv needs to build, test and bench (Debian 12).
#
# The one list of build dependencies: scripts/demo.sh and scripts/test.sh call
# this script. Installed packages are detected with dpkg-query; apt-get runs only
# when something is missing (needs root, or sudo).
#   bash scripts/install-deps.sh          install what is missing
#   bash scripts/install-deps.sh --list   print the package list and exit
set -euo pipefail

PACKAGES=(
  build-essential      # g++ (the default compiler), make, libc headers
  cmake
  ninja-build
  pkg-config
  clang                # second compiler; scripts/fuzz.sh (a scripts/test.sh step) needs clang++
  clang-format         # scripts/test.sh checks the formatting
  libclang-rt-14-dev   # clang's sanitizer runtimes and libFuzzer (libclang_rt.fuzzer-x86_64.a)
  libgtest-dev
  libgmock-dev
  libbenchmark-dev
  nlohmann-json3-dev
  libcli11-dev
  libspdlog-dev
  libfmt-dev
  libxxhash-dev
  libabsl-dev
  liburing-dev
  libgrpc++-dev        # tierkv master: the gRPC control plane (src/rpc/)
  protobuf-compiler-grpc  # grpc_cpp_plugin: generates the gRPC stubs of proto/tierkv/master.proto
  libprotobuf-dev
  protobuf-compiler    # protoc
  prometheus-cpp-dev   # tierkv master and store: the metrics data model and text format (src/metrics/)
  libmicrohttpd-dev    # tierkv master and store: the HTTP server of /metrics and /health
  zlib1g-dev           # gzip of /metrics
  libucx-dev           # the cross-host transport (src/transport/ucx_*): UCX over tcp, or verbs/RDMA
  python3              # scripts/test.sh checks the bench's JSON output with it
  libssl-dev           # libcrypto: the cluster token's HMAC, the connector's SHA-256 chunk hashes
  openssl              # the TLS tests make their certificates with it (docs/security.md's example)
  libre2-dev           # the master's remove_by_regex (RE2: linear time, no recursion)
  python3-dev          # the Python module: Python.h of Debian's /usr/bin/python3
  pybind11-dev         # the Python module's binding (CMake package pybind11)
  python3-pybind11
  python3-numpy        # tests/python and tierkv bench python (numpy buffers)
  python3-torch        # the tensor calls and their tests
  python3-pytest       # tests/python (scripts/test.sh runs it through ctest)
  python3-venv         # the documented venv install of the module (and its test, test_install.py)
  python3-pip          # ... pip installs it there, offline, without build isolation
  python3-setuptools   # ... the build backend of <build>/python/pyproject.toml
  fio                  # tierkv bench disk: the baseline of the SSD tier's raw path
  libopenblas0-pthread # tierkv bench engine: torch's BLAS for the bench only (LD_LIBRARY_PATH)
  libhiredis-dev       # tierkv bench redis: the Redis client (pkg-config hiredis)
  redis-server         # tierkv bench redis: the baseline server (the bench starts its own)
  gnuplot-nox          # tierkv bench trace --plot: the hit-rate curves (docs/benchmarks.md)
  etcd-server          # tierkv master --ha: the leader election (tests and bench failover start their own)
)

if [[ "${1:-}" == "--list" ]]; then
  printf '%s\n' "${PACKAGES[@]}"
  exit 0
fi

missing=()
for package in "${PACKAGES[@]}"; do
  status=$(dpkg-query -W -f='${Status}' "$package" 2>/dev/null || true)
  if [[ "$status" != "install ok installed" ]]; then
    missing+=("$package")
  fi
done

if ((${#missing[@]} == 0)); then
  echo "install-deps: all ${#PACKAGES[@]} packages are installed"
  exit 0
fi

echo "install-deps: installing ${missing[*]}"
sudo=()
if [[ $(id -u) -ne 0 ]]; then
  if ! command -v sudo >/dev/null; then
    echo "install-deps: error: missing packages (${missing[*]}) and not root (no sudo)" >&2
    exit 1
  fi
  sudo=(sudo)
fi
"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update
"${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
  "${missing[@]}"
echo "install-deps: done"
