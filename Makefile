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
# where Debian keeps it once `make setup` has installed libopenmpi-dev. MPI=0
# builds without it: src/engine/pipe_none.c replaces pipe.c, every engine is
# one process and a pipeline's options say "built without MPI" (plan
# --pipeline N still works). Default: 1 when pkg-config finds ompi-c. Use a
# BUILD directory of its own for each setting (objects do not record it).
MPI      ?= $(shell pkg-config --exists ompi-c 2>/dev/null && echo 1 || echo 0)
ifeq ($(MPI),0)
MPI_CFLAGS :=
MPI_LIBS   :=
MPI_DROP   := src/engine/pipe.c
else
MPI_CFLAGS := $(shell pkg-config --cflags ompi-c 2>/dev/null)
MPI_LIBS   := $(shell pkg-config --libs ompi-c 2>/dev/null || echo -lmpi)
MPI_DROP   := src/engine/pipe_none.c
endif
ALL_CFLAGS = $(CFLAGS_BASE) $(MPI_CFLAGS) $(CFLAGS)
LDLIBS   = -ljansson -lpcre2-8 -luring -lmicrohttpd -lxxhash -ledit $(MPI_LIBS) -lm -pthread
LDFLAGS  ?=

AVX2_FLAGS   = -mavx2 -mfma -mf16c
AVX512_FLAGS = -mavx512f -mavx512bw -mavx512vl -mavx512dq -mfma -mavx2 -mf16c

LIB_SRC  := $(filter-out $(MPI_DROP),$(shell find src -name '*.c' -not -path 'src/cli/*' -not -path 'src/server/*' | sort))
CLI_SRC  := $(shell find src/cli src/server -name '*.c' 2>/dev/null | sort)
TEST_SRC := $(sort $(wildcard tests/test_*.c))
FUZZ_SRC := $(sort $(wildcard tests/fuzz/fuzz_*.c))

LIB_OBJ  := $(LIB_SRC:%.c=$(BUILD)/obj/%.o)
CLI_OBJ  := $(CLI_SRC:%.c=$(BUILD)/obj/%.o)
TEST_BIN := $(TEST_SRC:tests/%.c=$(BUILD)/tests/%)
LIB      := $(BUILD)/libmoestream.a
BIN      := $(BUILD)/moestream

.PHONY: all test tests setup demo help clean clean-testdata asan ubsan tsan sanitize bench fuzz
all: $(BIN) $(TEST_BIN)

help:
	@echo "make            build $(BIN) and the test binaries (MPI=0: without Open MPI, no pipeline)"
	@echo "make demo       set up, then run the bundled default model (README's first command)"
	@echo "make test       set up, build, and run every test (README's second command)"
	@echo "make setup      install missing Debian packages (as root) or print the command"
	@echo "make asan       the test suite under AddressSanitizer + UBSan (build-asan/)"
	@echo "make tsan       the threaded tests under ThreadSanitizer (build-tsan/)"
	@echo "make fuzz       run every fuzz target (FUZZ_SECONDS=60); fuzz-smoke: ~10 s each (CI)"
	@echo "make bench      full-width benchmark ladder -> docs/PERFORMANCE.md (BENCH_QUICK=1: short)"
	@echo "make bench-kernels / bench-device   kernel and device benchmarks only"
	@echo "make clean      remove build directories"
	@echo "make clean-testdata   remove what the tests generated in BUILD (models, npm trees)"

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

# `moestream --version` names the commit it was built from: $(BUILD)/commit.h is
# rewritten only when HEAD moves, and the dependency files then rebuild help.o
MS_COMMIT := $(shell git rev-parse --short=12 HEAD 2>/dev/null)
$(shell mkdir -p $(BUILD) && printf '#define MS_COMMIT "%s"\n' '$(MS_COMMIT)' > $(BUILD)/commit.h.new && \
  { cmp -s $(BUILD)/commit.h.new $(BUILD)/commit.h || cp $(BUILD)/commit.h.new $(BUILD)/commit.h; }; rm -f $(BUILD)/commit.h.new)
$(BUILD)/obj/src/cli/help.o: ALL_CFLAGS += -I$(BUILD)

# The server's chat page (src/server/page/index.html) becomes a byte array in
# $(BUILD)/gen/page_html.h (od from coreutils; NUL-terminated, the size is
# sizeof - 1), so the binary serves it without any file at run time.
$(BUILD)/gen/page_html.h: src/server/page/index.html
	@mkdir -p $(dir $@)
	{ echo 'static const unsigned char page_html[] = {'; \
	  od -An -v -tu1 $< | sed 's/^ *//; s/ *$$//; s/  */, /g; /./s/$$/,/'; echo '0 };'; } > $@.tmp && mv $@.tmp $@
$(BUILD)/obj/src/server/page.o: $(BUILD)/gen/page_html.h
$(BUILD)/obj/src/server/page.o: ALL_CFLAGS += -I$(BUILD)/gen

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
	rm -rf build build-asan build-tsan build-nompi

# what the tests generated in $(BUILD) (models, npm trees, logits), keeping what
# make built: CI clears each suite's data before the next suite makes its own
clean-testdata:
	@find $(BUILD) -mindepth 1 -maxdepth 1 ! -name obj ! -name gen ! -name bench ! -name tests \
	  ! -name moestream ! -name libmoestream.a ! -name commit.h -exec rm -rf {} +

-include $(shell find $(BUILD)/obj -name '*.d' 2>/dev/null)
-include tests/fuzz/fuzz.mk
-include bench/bench.mk
