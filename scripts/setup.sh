#!/usr/bin/env bash
# Installs what gdt needs to build, test and run its demo on Debian 12, from
# Debian's archive only. Idempotent: installs nothing when everything is
# there. Runs apt-get as root, or through sudo.
set -euo pipefail

packages=(
  # Build
  cmake ninja-build g++ clang clang-format clang-tidy pkg-config ccache lld
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  libyaml-cpp-dev libyaml-dev libspdlog-dev libgtest-dev libgmock-dev libcurl4-openssl-dev
  libsqlite3-dev nlohmann-json3-dev libcli11-dev libcpp-httplib-dev
  libtomlplusplus-dev
  libbenchmark-dev
  # Checkpoints: zips, SHA-256 (libcrypto)
  libarchive-dev libssl-dev
  # clang's sanitizer and libFuzzer runtimes (only recommended by clang)
  libclang-rt-14-dev
  # Packaging: CPack .debs and their Depends (dpkg-shlibdeps)
  dpkg-dev
  # Run and test: real torchrun/gloo, network namespaces, git for sources
  python3-torch iproute2 git procps
  # Head/worker launcher tests: real Dask scheduler and workers
  python3-dask python3-distributed
  # MPI through gdt-rsh: OpenMPI's mpirun/orted and mpi4py
  openmpi-bin python3-mpi4py
  # HA: etcd v3 as the replicated state store, started by tests
  etcd-server etcd-client
  # TLS tests: certificates made at test time with the openssl CLI
  openssl
  # The dashboard's browser test: headless Chromium
  chromium
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

sudo=()
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "setup: need root or sudo to install: ${missing[*]}" >&2; exit 1; }
  sudo=(sudo)
fi
echo "setup: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update -qq
"${sudo[@]}" apt-get install -y -qq "${missing[@]}" >/dev/null
