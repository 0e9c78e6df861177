#!/usr/bin/env bash
# Installs the Debian packages qhexrt builds and tests with, when they are missing.
set -eu
pkgs=(gcc make libcjson-dev libjansson-dev libmicrohttpd-dev libpcre2-dev libutf8proc-dev libxxhash-dev)
missing=()
for p in "${pkgs[@]}"; do dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p"); done
[[ ${QHX_TEST_DEPS:-0} == 1 ]] && ! command -v npm >/dev/null && missing+=(npm)
[[ ${QHX_TEST_DEPS:-0} == 1 ]] && ! command -v clang >/dev/null && missing+=(clang)  # libFuzzer
[[ ${QHX_TEST_DEPS:-0} == 1 ]] && ! command -v curl >/dev/null && missing+=(curl)    # server tests
[[ ${QHX_TEST_DEPS:-0} == 1 ]] && ! command -v pkg-config >/dev/null && missing+=(pkg-config) # install test
# the aarch64 build and its tests (make CROSS=aarch64, make check-aarch64): Debian's cross compiler,
# qemu's user-mode emulator and the arm64 builds of the libraries (multiarch)
cross=()
if [[ ${QHX_TEST_DEPS:-0} == 1 || ${QHX_CROSS:-} == aarch64 ]]; then
    for p in gcc-aarch64-linux-gnu qemu-user file libc6-dev:arm64 "${pkgs[@]/%/:arm64}"; do
        [[ $p == gcc:arm64 || $p == make:arm64 ]] && continue
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || cross+=("$p")
    done
fi
sudo=; [[ $(id -u) -ne 0 ]] && sudo=sudo
if [[ ${#cross[@]} -gt 0 ]] && ! dpkg --print-foreign-architectures | grep -qx arm64; then
    $sudo dpkg --add-architecture arm64
fi
missing+=("${cross[@]}")
if [[ ${#missing[@]} -gt 0 ]]; then
    echo "installing: ${missing[*]}" >&2
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
fi
# the independent oracles the tests compare against (Hugging Face's Rust tokenizers, OpenAI's client)
if [[ ${QHX_TEST_DEPS:-0} == 1 && ! ( -d tests/oracle/node_modules/tokenizers && -d tests/oracle/node_modules/openai ) ]]; then
    (cd tests/oracle && npm ci --no-audit --no-fund --silent)
fi
