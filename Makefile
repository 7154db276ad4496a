# moestream - one GNU Makefile. `make help` lists the targets.
#
# Flags: C11, warnings are errors, no -ffast-math, no floating-point contraction
# (docs/DETERMINISM.md: the output bits must not depend on the compiler fusing
# a*b+c). SIMD kernels live in files named *_avx2.c / *_avx512.c and get their
# ISA flags per file; nothing else is compiled with ISA flags.

BUILD    ?= build
CC       ?= cc
OPT      ?= -O2
SAN      ?=
CFLAGS_BASE = -std=c11 $(OPT) -g -Wall -Wextra -Werror -Wno-unused-parameter \
              -ffp-contract=off -fno-fast-math -fno-strict-aliasing -D_GNU_SOURCE \
              -Iinclude -Isrc -pthread $(SAN)
CFLAGS   ?=
# Open MPI (the pipeline across processes, src/engine/pipe.c); pkg-config knows
# where Debian keeps it once `make setup` has installed libopenmpi-dev
MPI_CFLAGS := $(shell pkg-config --cflags ompi-c 2>/dev/null)
MPI_LIBS   := $(shell pkg-config --libs ompi-c 2>/dev/null || echo -lmpi)
ALL_CFLAGS = $(CFLAGS_BASE) $(MPI_CFLAGS) $(CFLAGS)
LDLIBS   = -ljansson -lpcre2-8 -luring -lmicrohttpd -lxxhash -ledit $(MPI_LIBS) -lm -pthread
LDFLAGS  ?=

AVX2_FLAGS   = -mavx2 -mfma -mf16c
AVX512_FLAGS = -mavx512f -mavx512bw -mavx512vl -mavx512dq -mfma -mavx2 -mf16c

LIB_SRC  := $(shell find src -name '*.c' -not -path 'src/cli/*' -not -path 'src/server/*' | sort)
CLI_SRC  := $(shell find src/cli src/server -name '*.c' 2>/dev/null | sort)
TEST_SRC := $(sort $(wildcard tests/test_*.c))
FUZZ_SRC := $(sort $(wildcard tests/fuzz/fuzz_*.c))

LIB_OBJ  := $(LIB_SRC:%.c=$(BUILD)/obj/%.o)
CLI_OBJ  := $(CLI_SRC:%.c=$(BUILD)/obj/%.o)
TEST_BIN := $(TEST_SRC:tests/%.c=$(BUILD)/tests/%)
LIB      := $(BUILD)/libmoestream.a
BIN      := $(BUILD)/moestream

.PHONY: all test tests setup demo help clean asan ubsan tsan sanitize bench fuzz
all: $(BIN) $(TEST_BIN)

help:
	@echo "make            build $(BIN) and the test binaries"
	@echo "make demo       set up, then run the bundled default model (README's first command)"
	@echo "make test       set up, build, and run every test (README's second command)"
	@echo "make setup      install missing Debian packages (as root) or print the command"
	@echo "make asan       the test suite under AddressSanitizer + UBSan (build-asan/)"
	@echo "make tsan       the threaded tests under ThreadSanitizer (build-tsan/)"
	@echo "make fuzz       run every fuzz target (FUZZ_SECONDS=60); fuzz-smoke: ~10 s each (CI)"
	@echo "make bench      full-width benchmark ladder -> docs/PERFORMANCE.md (BENCH_QUICK=1: short)"
	@echo "make bench-kernels / bench-device   kernel and device benchmarks only"
	@echo "make clean      remove build directories"

setup:
	@bash scripts/setup.sh

$(BUILD)/obj/%_avx2.o: %_avx2.c
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) $(AVX2_FLAGS) -MMD -MP -c $< -o $@

$(BUILD)/obj/%_avx512.o: %_avx512.c
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) $(AVX512_FLAGS) -MMD -MP -c $< -o $@

$(BUILD)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -MMD -MP -c $< -o $@

$(LIB): $(LIB_OBJ)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

$(BIN): $(CLI_OBJ) $(LIB)
	$(CC) $(ALL_CFLAGS) $(LDFLAGS) $(CLI_OBJ) $(LIB) $(LDLIBS) -o $@

$(BUILD)/tests/%: tests/%.c tests/check.h $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -Itests $(LDFLAGS) $< $(LIB) $(LDLIBS) -o $@

test: setup
	@$(MAKE) --no-print-directory all
	@BUILD=$(BUILD) bash tests/run.sh

demo: setup
	@$(MAKE) --no-print-directory $(BIN)
	@bash scripts/demo.sh

asan:
	@MS_SANITIZER=1 $(MAKE) --no-print-directory BUILD=build-asan OPT=-O1 \
	  SAN="-fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer" test

ubsan: asan

tsan:
	@$(MAKE) --no-print-directory BUILD=build-tsan OPT=-O1 SAN="-fsanitize=thread" all
	@BUILD=build-tsan TSAN=1 bash tests/run.sh

clean:
	rm -rf build build-asan build-tsan

-include $(shell find $(BUILD)/obj -name '*.d' 2>/dev/null)
-include tests/fuzz/fuzz.mk
-include bench/bench.mk
