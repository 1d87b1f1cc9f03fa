#!/usr/bin/env bash
# Installs the Debian packages ShardLab builds with, when missing. As root it runs apt-get; as
# anyone else it prints the one line to run and fails, so `make` stops before a confusing build error.
set -euo pipefail

packages=(build-essential cmake pkg-config libopenblas-dev libopenmpi-dev openmpi-bin
          nlohmann-json3-dev libcli11-dev libimgui-dev libglfw3-dev libstb-dev xvfb xauth zlib1g-dev libsimdjson-dev
          libgtest-dev libbenchmark-dev python3-matplotlib clang-format python3-venv)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
[ ${#missing[@]} -eq 0 ] && exit 0

line="apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y ${missing[*]}"
if [ "$(id -u)" -ne 0 ]; then
  echo "shardlab: missing Debian packages: ${missing[*]}" >&2
  echo "shardlab: run this once as root, then run make again:" >&2
  echo "  sudo sh -c '$line'" >&2
  exit 1
fi
echo "shardlab: installing missing Debian packages: ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "shardlab: packages installed"
