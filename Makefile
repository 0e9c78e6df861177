# qhexrt build. `make` builds build/qhx; `make test` runs every test; `make test-asan` runs them
# again under AddressSanitizer + UndefinedBehaviorSanitizer (in build-asan/).
CC      ?= cc
BUILD   ?= build
OPT     ?= -O2
SAN     ?=
CFLAGS  += -std=c11 $(OPT) -g -Wall -Wextra -Wshadow -Wno-unused-parameter -D_GNU_SOURCE -Iinclude -Isrc $(SAN) -MMD -MP
# SIMD kernels are compiled in on x86-64 (through target attributes) and chosen at run time
ifeq ($(shell uname -m),x86_64)
CFLAGS  += -DQHX_HAVE_AVX2 -DQHX_HAVE_AVX512
endif
LDLIBS  += -lcjson -ljansson -lpcre2-8 -lutf8proc -lxxhash -lm -lpthread
LDFLAGS += $(SAN)

LIB_SRC  := $(wildcard src/*.c src/*/*.c)
LIB_OBJ  := $(LIB_SRC:%.c=$(BUILD)/%.o)
TEST_SRC := $(wildcard tests/test_*.c)
TEST_BIN := $(TEST_SRC:tests/%.c=$(BUILD)/%)

all: $(BUILD)/qhx $(BUILD)/qhx_generate $(TEST_BIN)

$(BUILD)/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -c $< -o $@

$(BUILD)/libqhexrt.a: $(LIB_OBJ)
	rm -f $@ && ar rcs $@ $^

$(BUILD)/qhx: $(BUILD)/tools/qhx.o $(BUILD)/libqhexrt.a
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

# the seed's positional CLI: the same binary under another name
$(BUILD)/qhx_generate: $(BUILD)/qhx
	ln -sf qhx $@

$(BUILD)/test_%: $(BUILD)/tests/test_%.o $(BUILD)/tests/testlib.o $(BUILD)/libqhexrt.a
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

test: all
	tests/run.sh $(BUILD)

test-asan:
	$(MAKE) BUILD=build-asan OPT=-O1 SAN="-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=all" test

clean:
	rm -rf build build-asan

.PHONY: all test test-asan clean
-include $(LIB_OBJ:.o=.d) $(BUILD)/tools/qhx.d $(TEST_BIN:%=$(BUILD)/tests/%.d)

# The README's two commands: install what is missing, build, then run.
deps:
	scripts/deps.sh

demo: deps
	$(MAKE) $(BUILD)/qhx
	$(BUILD)/qhx generate models/q35-kjv "In the beginning" -n 64

check:
	QHX_TEST_DEPS=1 scripts/deps.sh
	$(MAKE) test
	$(MAKE) test-asan

.PHONY: deps demo check

$(BUILD)/tok_bench: $(BUILD)/bench/tok_bench.o $(BUILD)/libqhexrt.a
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)

$(BUILD)/quant_error: $(BUILD)/bench/quant_error.o $(BUILD)/libqhexrt.a
	$(CC) $(LDFLAGS) -o $@ $^ $(LDLIBS)
