# qhexrt build. `make` builds build/qhx. Tests in tiers (tests/run.sh): `make test-quick` for every
# edit (the C tests, the default kernel family, under a minute), `make test` (everything),
# `make test-asan` (the quick tier, fuzz replays, server and chat under AddressSanitizer +
# UndefinedBehaviorSanitizer, in build-asan/), `make check` (what CI runs).
# `make CROSS=aarch64 ...` builds for 64-bit Arm with Debian's cross compiler against the arm64
# builds of the libraries (scripts/deps.sh installs both with QHX_CROSS=aarch64), into build-aarch64;
# `make CROSS=aarch64 test-emu` runs the whole suite under qemu-aarch64 (EMU_CPU=max by default).
# every core, unless the command line says -j
ifeq ($(filter -j%,$(MAKEFLAGS)),)
MAKEFLAGS += -j$(shell nproc)
endif
ifeq ($(CROSS),aarch64)
CC      := aarch64-linux-gnu-gcc
BUILD   ?= build-aarch64
ARCH    := aarch64
endif
CC      ?= cc
BUILD   ?= build
# `make STATIC=1` (with CROSS=aarch64: the seed's deployment, qhx_generate pushed to a phone with
# adb): qhx and qhx_generate statically linked, into BUILD/static, from the same objects, against
# Debian's static archives, with cJSON and libmicrohttpd (no HTTPS) built from Debian's sources
# (scripts/static_deps.sh: Debian ships neither as a static archive that links)
STATIC_DEPS = $(BUILD)/static-deps
ARCH    ?= $(shell uname -m)
OPT     ?= -O2
SAN     ?=
# the SIMD kernel instantiations' sanitizers: the fuzz build leaves them out (KERNEL_SAN=), since
# clang takes minutes over their intrinsics instrumented and no parser runs in them; test-asan
# checks them under gcc's
KERNEL_SAN ?= $(SAN)
OBJ_SAN  = $(SAN)
$(addprefix $(BUILD)/src/kernels/,fp32_avx2.o fp32_avx512.o int_avx2.o int_vnni.o): OBJ_SAN = $(KERNEL_SAN)
CFLAGS  += -std=c11 $(OPT) -g -Wall -Wextra -Wshadow -Wno-unused-parameter -D_GNU_SOURCE -Iinclude -Isrc $(OBJ_SAN) -MMD -MP \
           -fPIC -fvisibility=hidden
# SIMD kernels are compiled in (x86-64: through target attributes; aarch64: NEON is the baseline,
# the dot-product kernels get their own -march) and chosen at run time
ifeq ($(ARCH),x86_64)
CFLAGS  += -DQHX_HAVE_AVX2 -DQHX_HAVE_AVX512
endif
ifeq ($(ARCH),aarch64)
CFLAGS  += -DQHX_HAVE_NEON
$(BUILD)/src/kernels/int_neon.o: CFLAGS += -march=armv8.2-a+dotprod
$(BUILD)/src/kernels/int_neon_i8mm.o: CFLAGS += -march=armv8.2-a+dotprod+i8mm
endif
VERSION := $(shell sed -n 's/^\#define QHX_VERSION "\(.*\)"/\1/p' include/qhexrt.h)
# the soname carries the major version alone: it moves only when the ABI breaks
SONAME  := libqhexrt.so.$(firstword $(subst ., ,$(VERSION)))
LIB_LIBS := -lcjson -ljansson -lpcre2-8 -lutf8proc -lxxhash -lm -lpthread
LDLIBS  += -lmicrohttpd -ledit $(LIB_LIBS)
LDFLAGS += $(SAN)

LIB_SRC  := $(wildcard src/*.c src/*/*.c)
LIB_OBJ  := $(LIB_SRC:%.c=$(BUILD)/%.o)
TEST_SRC := $(wildcard tests/test_*.c)
TEST_BIN := $(TEST_SRC:tests/%.c=$(BUILD)/%)
FUZZERS  := $(patsubst fuzz/%.c,%,$(wildcard fuzz/fuzz_*.c))
FUZZ_REPLAY := $(FUZZERS:%=$(BUILD)/fuzz/%)

EXAMPLES := $(patsubst examples/%.c,$(BUILD)/examples/%,$(wildcard examples/*.c))

ifeq ($(STATIC),1)
all: $(BUILD)/static/qhx $(BUILD)/static/qhx_generate
else
all: $(BUILD)/qhx $(BUILD)/qhx_generate $(BUILD)/gguf_synth $(BUILD)/$(SONAME) $(TEST_BIN) $(FUZZ_REPLAY) $(BUILD)/pty_drive $(EXAMPLES)
endif

# objects rebuild when the compiler or its flags change, not only their sources
FLAGS_FILE := $(BUILD)/.cflags
$(shell mkdir -p $(BUILD) && echo '$(CC) $(CFLAGS)' | cmp -s - $(FLAGS_FILE) || echo '$(CC) $(CFLAGS)' > $(FLAGS_FILE))

$(BUILD)/%.o: %.c $(FLAGS_FILE)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c $< -o $@

$(BUILD)/libqhexrt.a: $(LIB_OBJ)
	rm -f $@ && ar rcs $@ $^

# the shared library: versioned, exporting qhexrt.h and qhexrt_tools.h alone (-fvisibility=hidden)
$(BUILD)/$(SONAME): $(LIB_OBJ)
	$(CC) $(LDFLAGS) -shared -Wl,-soname,$(SONAME) -Wl,--no-undefined -o $@ $^ $(LIB_LIBS)

# `make install PREFIX=/usr/local` (DESTDIR for staging): the headers, libqhexrt.so.MAJOR.MINOR.PATCH
# with its soname and development links, the static library and a pkg-config file; ldconfig runs
# when the library directory is one the dynamic linker searches
PREFIX  ?= /usr/local
LIBDIR  ?= $(PREFIX)/lib
install: $(BUILD)/libqhexrt.a $(BUILD)/$(SONAME)
	install -d $(DESTDIR)$(PREFIX)/include $(DESTDIR)$(LIBDIR)/pkgconfig
	install -m 644 include/qhexrt.h include/qhexrt_tools.h $(DESTDIR)$(PREFIX)/include/
	install -m 755 $(BUILD)/$(SONAME) $(DESTDIR)$(LIBDIR)/libqhexrt.so.$(VERSION)
	ln -sf libqhexrt.so.$(VERSION) $(DESTDIR)$(LIBDIR)/$(SONAME)
	ln -sf $(SONAME) $(DESTDIR)$(LIBDIR)/libqhexrt.so
	install -m 644 $(BUILD)/libqhexrt.a $(DESTDIR)$(LIBDIR)/
	sed -e 's|@PREFIX@|$(PREFIX)|; s|@LIBDIR@|$(LIBDIR)|; s|@VERSION@|$(VERSION)|; s|@LIBS@|$(LIB_LIBS)|' \
	    qhexrt.pc.in > $(DESTDIR)$(LIBDIR)/pkgconfig/qhexrt.pc
	@if [ -z "$(DESTDIR)" ] && /sbin/ldconfig -v -N 2>/dev/null | grep -q "^$$(realpath -m $(LIBDIR)):"; then \
	    echo "ldconfig"; /sbin/ldconfig || echo "make install: ldconfig failed (not root?); run it before using $(LIBDIR)/$(SONAME)"; fi

# the command line as a library (every command, no main) that the fuzzers link as qhx runs it
TOOL_OBJ := $(patsubst %.c,$(BUILD)/%.o,$(filter-out tools/main.c,$(wildcard tools/*.c)))

$(BUILD)/libqhxcli.a: $(TOOL_OBJ)
	rm -f $@ && ar rcs $@ $^

$(BUILD)/qhx: $(BUILD)/tools/main.o $(BUILD)/libqhxcli.a $(BUILD)/libqhexrt.a
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

# the seed's positional CLI: the same binary under another name
$(BUILD)/qhx_generate: $(BUILD)/qhx
	ln -sf qhx $@

$(STATIC_DEPS)/lib/libmicrohttpd.a:
	scripts/static_deps.sh $(STATIC_DEPS) $(CC)

# libedit.a needs tinfo, bsd and md, which the shared libedit brings along
$(BUILD)/static/qhx: $(BUILD)/tools/main.o $(BUILD)/libqhxcli.a $(BUILD)/libqhexrt.a | $(STATIC_DEPS)/lib/libmicrohttpd.a
	@mkdir -p $(dir $@)
	$(CC) $(LDFLAGS) -static -L$(STATIC_DEPS)/lib -o $@ $^ $(LDLIBS) -ltinfo -lbsd -lmd

$(BUILD)/static/qhx_generate: $(BUILD)/static/qhx
	ln -sf qhx $@

# the fuzz harnesses built with the normal compiler and a file-replaying main (tests/fuzz_regress.sh)
$(BUILD)/fuzz/fuzz_%: $(BUILD)/fuzz/fuzz_%.o $(BUILD)/fuzz/driver.o $(BUILD)/libqhxcli.a $(BUILD)/libqhexrt.a
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

# libFuzzer: `make fuzz` runs each harness for FUZZ_TIME seconds, a core each at a time (clang
# needed; scripts/deps.sh installs it with QHX_TEST_DEPS=1). New inputs go to build-fuzz/corpus;
# crashes to build-fuzz/ (xargs stops at the first failing harness: exit 255).
FUZZ_TIME ?= 60
FUZZ_SAN = -fsanitize=address,undefined
fuzz: $(BUILD)/qhx
	$(MAKE) CC=clang BUILD=build-fuzz/obj OPT=-O1 SAN="$(FUZZ_SAN) -fsanitize=fuzzer-no-link" KERNEL_SAN= build-fuzz/obj/libqhexrt.a build-fuzz/obj/libqhxcli.a
	@set -e; for f in $(FUZZERS); do \
	    clang -std=c11 -g -O1 -D_GNU_SOURCE -Iinclude -Isrc $(filter -DQHX_%,$(CFLAGS)) $(FUZZ_SAN) -fsanitize=fuzzer \
	        fuzz/$$f.c build-fuzz/obj/libqhxcli.a build-fuzz/obj/libqhexrt.a -o build-fuzz/$$f $(LDLIBS); \
	done
	@printf '%s\n' $(FUZZERS) | xargs -P $$(nproc) -I{} sh -c 'f={}; n=$${f#fuzz_}; mkdir -p build-fuzz/corpus/$$n; \
	    QHX_FUZZ_TOKENIZER=$(BUILD)/data/tokenizers/qwen3/tokenizer.json \
	    build-fuzz/$$f build-fuzz/corpus/$$n fuzz/corpus/$$n -max_total_time=$(FUZZ_TIME) -timeout=20 \
	        -rss_limit_mb=2048 -close_fd_mask=3 -artifact_prefix=build-fuzz/$$n- 2>build-fuzz/$$n.log \
	        || { echo "fuzz_$$n: FAILED, see build-fuzz/$$n.log and build-fuzz/$$n-*"; exit 255; }; \
	    echo "fuzz_$$n: $$(grep -o "Done [0-9]* runs in [0-9]* second(s)" build-fuzz/$$n.log)"' 

$(BUILD)/test_%: $(BUILD)/tests/test_%.o $(BUILD)/tests/testlib.o $(BUILD)/libqhexrt.a
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

# the tests of the command line's own parts link it as a library
$(BUILD)/tests/test_tool_calls.o: CFLAGS += -Itools
$(BUILD)/test_tool_calls: $(BUILD)/tests/test_tool_calls.o $(BUILD)/tests/testlib.o $(BUILD)/libqhxcli.a $(BUILD)/libqhexrt.a
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

# examples/: programs on the public API alone (the tests build and run them)
$(BUILD)/examples/%: $(BUILD)/examples/%.o $(BUILD)/libqhexrt.a
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

# drives interactive commands through a pseudo-terminal (tests/chat_test.sh)
$(BUILD)/pty_drive: $(BUILD)/tests/pty_drive.o
	$(CC) $(LDFLAGS) -o $@ $^ -lutil

test: all
	tests/run.sh $(BUILD)

test-quick: $(TEST_BIN)
	tests/run.sh $(BUILD) quick

# bugs the tests once caught, put back one at a time: the quick tier must fail on each
test-mutants: all
	tests/mutants.sh $(BUILD)

# the aarch64 build under qemu-aarch64: the library, the CLI and the two tests it runs there
# (kernels, parity), a cross-machine bundle and the statically linked CLI (make check runs it);
# test-emu builds and runs the whole suite that way (slow: every program emulated)
check-aarch64: all
	$(MAKE) CROSS=aarch64 BUILD=build-aarch64 build-aarch64/qhx build-aarch64/qhx_generate build-aarch64/test_kernels build-aarch64/test_parity
	$(MAKE) CROSS=aarch64 BUILD=build-aarch64 STATIC=1
	tests/aarch64_test.sh build-aarch64 $(BUILD) build-aarch64/static

EMU_CPU ?= max
test-emu: all
	scripts/emu_tree.sh $(BUILD) $(BUILD)-emu-$(EMU_CPU) qemu-aarch64 -cpu $(EMU_CPU)
	tests/run.sh $(BUILD)-emu-$(EMU_CPU)

test-asan:
	$(MAKE) BUILD=build-asan OPT=-O1 SAN="-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all" all
	tests/run.sh build-asan sanitize

# memcheck over the test binaries and the CLI (slow; not part of make check)
test-valgrind: all
	tests/valgrind.sh $(BUILD)

clean:
	rm -rf build build-asan build-fuzz build-aarch64 build-aarch64-emu

.SECONDARY:
.PHONY: all test test-quick test-mutants test-asan test-valgrind clean fuzz install check-aarch64 test-emu
# every object's header dependencies (tests, fuzzers, bench and examples too: a header change
# that moves a struct must rebuild them all)
-include $(shell find $(BUILD) -name '*.d' 2>/dev/null)

# The README's two commands: install what is missing, build, then run.
deps:
	scripts/deps.sh

demo: deps
	$(MAKE) $(BUILD)/qhx
	$(BUILD)/qhx generate models/q35-kjv "In the beginning" -n 64

# the fuzzers get a short budget here; `make fuzz FUZZ_TIME=3600` for real runs
CHECK_FUZZ_TIME ?= 5
check:
	QHX_TEST_DEPS=1 scripts/deps.sh
	$(MAKE) test
	$(MAKE) test-asan
	$(MAKE) check-aarch64
	$(MAKE) fuzz FUZZ_TIME=$(CHECK_FUZZ_TIME)

.PHONY: deps demo check

# bench/: programs on the library's insides, one file each (bench/README.md says what each measures)
BENCH_BIN = tok_bench grammar_bench quant_error w4_options kernel_bench attend_bench gguf_synth prefix_bench moe_quality w8_greedy sessions_bench
$(addprefix $(BUILD)/,$(BENCH_BIN)): $(BUILD)/%: $(BUILD)/bench/%.o $(BUILD)/libqhexrt.a
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)
