#!/usr/bin/env bash
# `make install` as a C user meets it: the headers, libqhexrt.so.MAJOR exporting the public API and
# nothing else, the static library, and qhexrt.pc; examples/minimal.c built against the installed
# copy alone (pkg-config, shared and static) gives what the in-tree build gives.
source "$(dirname "$0")/lib.sh"
prefix="$tmp/prefix"
# On an emulated tree: install the build it mirrors, compile the example with that architecture's
# cross compiler, run it through the emulator.
mk=(BUILD="$build") cc=cc nm=nm
if ((${#emu[@]})); then
    arch=${emu[0]#qemu-}
    mk=(CROSS="$arch" BUILD="$emu_build") cc=$arch-linux-gnu-gcc nm=$arch-linux-gnu-nm
fi
# run LOG MESSAGE CMD...: a check that shows the command's output when it fails
run() {
    local log=$1 msg=$2; shift 2
    if "$@" >"$log" 2>&1; then ok; else bad "$msg: $(head -c 400 "$log")"; fi
}
run "$tmp/install.log" "make install" make -s install "${mk[@]}" PREFIX="$prefix"
version=$(sed -n 's/^#define QHX_VERSION "\(.*\)"/\1/p' include/qhexrt.h)
so=libqhexrt.so.${version%%.*}
for f in include/qhexrt.h include/qhexrt_tools.h lib/libqhexrt.a lib/libqhexrt.so lib/$so "lib/libqhexrt.so.$version" lib/pkgconfig/qhexrt.pc; do
    check '[[ -e $prefix/$f ]]' "installed $f"
done
check '[[ $(readelf -d "$prefix/lib/$so" | grep -o "Library soname: \[[^]]*\]") == "Library soname: [$so]" ]]' "soname $so"
check '[[ $(readlink "$prefix/lib/$so") == "libqhexrt.so.$version" ]]' "$so links to libqhexrt.so.$version"
# exported symbols == the functions the two public headers declare (the inline ones that pass a
# struct's size excepted: they live in the caller)
"$nm" -D --defined-only "$prefix/lib/$so" | awk '{print $3}' | sort >"$tmp/exported"
grep -hoP 'static inline \w+ \K(qhx_\w+)(?=\()' "$prefix/include/qhexrt.h" "$prefix/include/qhexrt_tools.h" | sort -u >"$tmp/inline"
grep -ho '\bqhx_[a-z0-9_]*(' "$prefix/include/qhexrt.h" "$prefix/include/qhexrt_tools.h" | tr -d '(' | sort -u | comm -23 - "$tmp/inline" >"$tmp/declared"
check '[[ -s $tmp/exported ]] && cmp -s "$tmp/exported" "$tmp/declared"' "exports are the API: $(comm -3 "$tmp/exported" "$tmp/declared" | tr -s ' \t\n' ' ')"
pc() { PKG_CONFIG_PATH="$prefix/lib/pkgconfig" pkg-config "$@" qhexrt; }
check '[[ $(pc --modversion) == $(sed -n "s/^#define QHX_VERSION \"\(.*\)\"/\1/p" include/qhexrt.h) ]]' "pkg-config --modversion"
# a sanitizer build's library needs its runtime in the program too (make test-asan)
san=; nm "$build/libqhexrt.a" 2>/dev/null | grep -q ' U __asan_' && san="-fsanitize=address,undefined"
# built from a copy of the example in an empty directory: nothing of the source tree on the paths
mkdir -p "$tmp/user" && cp examples/minimal.c "$tmp/user/"
run "$tmp/cc.log" "build against the shared library" \
    sh -c "cd '$tmp/user' && $cc -std=c11 -Wall -Wextra -Werror $san minimal.c $(pc --cflags --libs) -Wl,-rpath,'$prefix/lib' -o minimal-shared"
run "$tmp/cc2.log" "build against the static library" \
    sh -c "cd '$tmp/user' && $cc -std=c11 $san minimal.c $(pc --static --cflags) '$prefix/lib/libqhexrt.a' $(pc --static --libs | sed 's/-lqhexrt//') -o minimal-static"
if ((${#emu[@]})); then # ldd cannot read another architecture's program: its run path, and a run
    check '[[ $(readelf -d "$tmp/user/minimal-shared") == *"path: [$prefix/lib]"* ]] && "${emu[@]}" "$tmp/user/minimal-shared" 2>&1 | grep -q usage' \
        "the shared build finds the installed library"
else
    check 'ldd "$tmp/user/minimal-shared" | grep -q "$so => $prefix/lib/$so"' "the shared build loads the installed library"
fi
"$build/examples/minimal" models/q35-kjv "In the beginning" 16 >"$tmp/want" 2>&1
for v in shared static; do
    ${emu[@]+"${emu[@]}"} "$tmp/user/minimal-$v" models/q35-kjv "In the beginning" 16 >"$tmp/got-$v" 2>&1
    check 'cmp -s "$tmp/want" "$tmp/got-$v" && grep -q "16 generated" "$tmp/got-$v"' "minimal ($v) gives the in-tree output: $(head -c 200 "$tmp/got-$v")"
done
finish install
