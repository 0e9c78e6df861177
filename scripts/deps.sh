#!/usr/bin/env bash
# Installs the Debian packages qhexrt builds and tests with, when they are missing.
set -eu
pkgs=(gcc make libcjson-dev libjansson-dev libmicrohttpd-dev libpcre2-dev libutf8proc-dev libxxhash-dev libedit-dev)
missing=()
for p in "${pkgs[@]}"; do dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing+=("$p"); done
[[ ${QHX_TEST_DEPS:-0} == 1 ]] && ! command -v npm >/dev/null && missing+=(npm)
[[ ${QHX_TEST_DEPS:-0} == 1 ]] && ! command -v clang >/dev/null && missing+=(clang)  # libFuzzer
[[ ${QHX_TEST_DEPS:-0} == 1 ]] && ! command -v curl >/dev/null && missing+=(curl)    # server tests
[[ ${QHX_TEST_DEPS:-0} == 1 ]] && ! command -v pkg-config >/dev/null && missing+=(pkg-config) # install test
# the aarch64 build and its tests (make CROSS=aarch64, make check-aarch64): Debian's cross compiler,
# qemu's user-mode emulator and the arm64 builds of the libraries (multiarch); dpkg-dev unpacks the
# Debian sources that the static build compiles (scripts/static_deps.sh)
cross=()
if [[ ${QHX_TEST_DEPS:-0} == 1 || ${QHX_CROSS:-} == aarch64 ]]; then
    for p in gcc-aarch64-linux-gnu qemu-user file dpkg-dev libc6-dev:arm64 libncurses-dev:arm64 libbsd-dev:arm64 "${pkgs[@]/%/:arm64}"; do
        [[ $p == gcc:arm64 || $p == make:arm64 ]] && continue
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || cross+=("$p")
    done
fi
sudo=; [[ $(id -u) -ne 0 ]] && sudo=sudo
if [[ ${#cross[@]} -gt 0 ]] && ! dpkg --print-foreign-architectures | grep -qx arm64; then
    $sudo dpkg --add-architecture arm64
fi
missing+=("${cross[@]}")
# apt as root, waiting (up to QHX_APT_WAIT seconds, default 600) while another apt or an unattended
# upgrade holds its lock, instead of failing on the first try
apt_wait() {
    local limit=${QHX_APT_WAIT:-600} start=$SECONDS err
    err=$(mktemp)
    until DEBIAN_FRONTEND=noninteractive $sudo apt-get -o DPkg::Lock::Timeout=10 "$@" 2>"$err" >/dev/null; do
        if ! grep -qiE 'could not get lock|unable to acquire|is another process using it' "$err"; then
            cat "$err" >&2; rm -f "$err"; echo "scripts/deps.sh: apt-get $1 failed" >&2; exit 1
        fi
        if ((SECONDS - start >= limit)); then
            rm -f "$err"
            echo "scripts/deps.sh: apt's lock still held after ${limit} s (another apt or unattended-upgrades); rerun when it is done, or set QHX_APT_WAIT" >&2
            exit 1
        fi
        echo "scripts/deps.sh: waiting for apt's lock ($((SECONDS - start)) s)" >&2
        sleep 5
    done
    rm -f "$err"
}
if [[ ${#missing[@]} -gt 0 ]]; then
    echo "installing: ${missing[*]}" >&2
    apt_wait update -qq
    apt_wait install -y -qq "${missing[@]}"
fi
# the independent oracles the tests compare against (Hugging Face's Rust tokenizers; the openai,
# Anthropic, LangChain and AI SDK clients); reinstalled when any in package.json is missing (a
# package's own package.json, which not every package exports: then its folder)
if [[ ${QHX_TEST_DEPS:-0} == 1 ]] && ! (cd tests/oracle && node -e 'const fs = require("fs");
        for (const d of Object.keys(require("./package.json").dependencies)) if (!fs.existsSync("node_modules/" + d + "/package.json")) process.exit(1)' 2>/dev/null); then
    (cd tests/oracle && npm ci --no-audit --no-fund --silent)
fi
