#!/usr/bin/env bash
# System packages the Python stack needs:
# - a C++ toolchain and cmake to build alfworld's planner (fast-downward-textworld) and jericho;
# - Debian's Chromium for WebArena: Playwright drives /usr/bin/chromium and never downloads a
#   browser of its own (see docs/webarena.md, "The browser").
# apt runs under `flock /tmp/apt.lock` so that parallel setups on one machine wait for each other.
set -euo pipefail
missing=()
for tool in g++ cmake make chromium; do
  command -v "$tool" >/dev/null 2>&1 || missing+=("$tool")
done
[ ${#missing[@]} -eq 0 ] && exit 0
declare -A pkg=([g++]=g++ [cmake]=cmake [make]=make [chromium]=chromium)
pkgs=(); for t in "${missing[@]}"; do pkgs+=("${pkg[$t]}"); done
if [ "$(id -u)" -ne 0 ]; then
  echo "error: missing system tools: ${missing[*]}. Install them as root, e.g." >&2
  echo "  sudo apt-get install -y ${pkgs[*]}" >&2
  exit 1
fi
echo "installing system packages: ${pkgs[*]}"
flock /tmp/apt.lock apt-get update -qq
flock /tmp/apt.lock env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${pkgs[@]}"
