#!/usr/bin/env bash
# Mirrors a cross build directory for running it under user-mode emulation: every executable of
# another architecture becomes a script that runs it through the emulator (argv[0] kept, so
# qhx_generate stays itself), every other file a link. The tests then take the mirror as their
# build directory unchanged, including the programs they start from programs (test_gguf's
# gguf_synth). usage: scripts/emu_tree.sh SRC DST EMULATOR...   e.g. qemu-aarch64 -cpu max
set -eu
src=$(realpath "$1") dst=$2; shift 2
rm -rf "$dst" && mkdir -p "$dst"
dst=$(realpath "$dst")
(cd "$src" && find . -type d) | while read -r d; do mkdir -p "$dst/$d"; done
(cd "$src" && find . -type f -o -type l) | while read -r f; do
    if [[ -x $src/$f ]] && file -L -b "$src/$f" | grep -q 'ELF.*executable'; then # -L: qhx_generate links to qhx
        printf '#!/bin/sh\nexec %s -0 "$0" %q "$@"\n' "$*" "$src/${f#./}" >"$dst/$f"
        chmod +x "$dst/$f"
    else
        ln -s "$src/${f#./}" "$dst/$f"
    fi
done
