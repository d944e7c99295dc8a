#!/usr/bin/env bash
# System packages the Python stack needs: a C++ toolchain and cmake to build
# alfworld's planner (fast-downward-textworld) and jericho.
set -euo pipefail
missing=()
for tool in g++ cmake make; do
  command -v "$tool" >/dev/null 2>&1 || missing+=("$tool")
done
[ ${#missing[@]} -eq 0 ] && exit 0
declare -A pkg=([g++]=g++ [cmake]=cmake [make]=make)
pkgs=(); for t in "${missing[@]}"; do pkgs+=("${pkg[$t]}"); done
if [ "$(id -u)" -ne 0 ]; then
  echo "error: missing system tools: ${missing[*]}. Install them as root, e.g." >&2
  echo "  sudo apt-get install -y ${pkgs[*]}" >&2
  exit 1
fi
echo "installing system packages: ${pkgs[*]}"
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${pkgs[@]}"
