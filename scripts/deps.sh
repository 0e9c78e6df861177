#!/usr/bin/env bash
# Installs the Debian packages qhexrt builds and tests with, when they are missing.
set -eu
pkgs=(gcc make libcjson-dev libjansson-dev libpcre2-dev libutf8proc-dev)
[[ ${QHX_TEST_DEPS:-0} == 1 ]] && pkgs+=(clang valgrind)
missing=()
for p in "${pkgs[@]}"; do dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p"); done
[[ ${#missing[@]} -eq 0 ]] && exit 0
echo "installing: ${missing[*]}" >&2
sudo=; [[ $(id -u) -ne 0 ]] && sudo=sudo
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
