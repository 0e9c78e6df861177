#!/usr/bin/env bash
# Static archives of the two libraries that Debian ships as shared objects alone, for the statically
# linked build (make STATIC=1): cJSON (libcjson-dev has no libcjson.a) and libmicrohttpd without
# HTTPS (Debian's libmicrohttpd.a needs GnuTLS, whose p11-kit has no static archive; qhx serve
# speaks plain HTTP). Each is built from Debian's own source package, the version installed here,
# Debian's patches applied (apt-get source, with a private package list: the system's apt sources
# stay as they are), for the target compiler, into OUT/lib; the code compiles against the installed
# headers of the same versions.
# usage: scripts/static_deps.sh OUT CC
set -eu
out=$1 cc=$2
[[ -s $out/lib/libcjson.a && -s $out/lib/libmicrohttpd.a ]] && exit 0
host=$($cc -dumpmachine) || { echo "scripts/static_deps.sh: no compiler '$cc'" >&2; exit 1; }
rm -rf "$out" && mkdir -p "$out/src" "$out/lib" "$out/apt/lists/partial" "$out/apt/cache/archives/partial"
out=$(cd "$out" && pwd)
log=$out/build.log
fail() { echo "scripts/static_deps.sh: $1 (see $log)" >&2; exit 1; }
apt=(-o Dir::Etc::SourceList=/dev/null -o Dir::Etc::SourceParts="$out/apt" -o Dir::State::Lists="$out/apt/lists"
     -o Dir::Cache="$out/apt/cache" -o APT::Sandbox::User=root)
codename=$(. /etc/os-release && echo "$VERSION_CODENAME")
printf 'Types: deb-src\nURIs: http://deb.debian.org/debian\nSuites: %s\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' \
    "$codename" >"$out/apt/src.sources"
apt-get "${apt[@]}" update >"$log" 2>&1 || fail "apt-get update of Debian's source list failed"
version() { dpkg-query -W -f='${source:Version}\n' "$1" 2>/dev/null | head -n 1; }
(cd "$out/src" && apt-get "${apt[@]}" source "cjson=$(version libcjson-dev)" "libmicrohttpd=$(version libmicrohttpd-dev)") >>"$log" 2>&1 ||
    fail "apt-get source cjson libmicrohttpd failed"

cj=$(echo "$out"/src/cjson-*/)
"$cc" -std=c89 -O2 -fPIC -c "$cj/cJSON.c" -o "$out/src/cJSON.o" >>"$log" 2>&1 || fail "cJSON did not build"
ar rcs "$out/lib/libcjson.a" "$out/src/cJSON.o"

mhd=$(echo "$out"/src/libmicrohttpd-*/)
(cd "$mhd" && ./configure --host="$host" CC="$cc" --disable-https --disable-shared --enable-static --disable-doc \
     --disable-examples --disable-curl --disable-dependency-tracking && make -C src/microhttpd -j"$(nproc)") >>"$log" 2>&1 ||
    fail "libmicrohttpd did not build"
cp "$mhd/src/microhttpd/.libs/libmicrohttpd.a" "$out/lib/"
echo "static archives in $out/lib: libcjson.a (cjson $(version libcjson-dev)), libmicrohttpd.a (libmicrohttpd $(version libmicrohttpd-dev), no HTTPS)"
