# tests/fuzz/fuzz.mk - libFuzzer builds and runs of every parser's fuzz target.
# Included by the main Makefile (`-include tests/fuzz/fuzz.mk`).
#
# Owns: build-fuzz/ (objects, library, target binaries, working corpora, logs,
#   crash artifacts, the tiny models of the server and file-format targets)
#   and the targets `fuzz`, `fuzz-smoke`, `fuzz-build`, `fuzz-clean`.
# Idea: the library is rebuilt with Debian's clang under
#   -fsanitize=fuzzer-no-link,address,undefined (same per-file ISA flags and
#   project flags as the main build); each tests/fuzz/fuzz_NAME.c links with
#   -fsanitize=fuzzer,address,undefined. A run copies the committed seeds
#   tests/fuzz/corpus/NAME/ into build-fuzz/corpus/NAME/ (kept between runs,
#   so coverage accumulates there) and fuzzes only that copy: the committed
#   corpus never grows by itself; tests/fuzz/grown/NAME/ (inputs of long runs
#   that added coverage, merged in by hand: see "Does not") is copied too.
#   Each target runs FUZZ_SECONDS (or FUZZ_RUNS
#   executions, if that comes first; -1: no limit); crashes,
#   leaks, UB and violated properties land in build-fuzz/crashes/NAME-*.
#   The summary line per target ("fuzz_NAME: N execs in S s, ...") comes from
#   libFuzzer's -print_final_stats; the run fails if any target failed.
# Usage:
#   make fuzz FUZZ_SECONDS=60     every target for 60 s (default 60)
#   make fuzz-smoke               every target for ~10 s (CI)
#   make fuzz FUZZ_TARGETS="config index"   a subset
#   make fuzz FUZZ_SECONDS=3600 FUZZ_RUNS=10000000
#                                 10 M executions or an hour, whichever comes first
#   make fuzz FUZZ_SECONDS=30000 FUZZ_CPU_SECONDS=3600 FUZZ_RUNS=10000000
#                                 the same by CPU time (tests/fuzz/cpu_limit.sh), for
#                                 a machine shared with other work
#   make fuzz-clean               remove build-fuzz/
#   reproduce: build-fuzz/fuzz_NAME path/to/crash-file   (from the repository
#     root; the server, session, sums and packfile targets read their model
#     from MS_FUZZ_MODEL, default build-fuzz/model; the server target also a
#     gpt-oss model from MS_FUZZ_OSS_MODEL, default build-fuzz/oss_model)
# Does not: touch build/ (but for the server page's generated header, which
#   the main Makefile's rule writes there) or the committed corpus; minimise
#   corpora (after a long run, by hand: `build-fuzz/fuzz_NAME -merge=1
#   tests/fuzz/grown/NAME build-fuzz/corpus/NAME` keeps the inputs that add
#   coverage; tests/fuzz/mkseeds.py rewrites corpus/, never grown/).

FUZZ_CC      ?= clang
FUZZ_BUILD   ?= build-fuzz
FUZZ_SECONDS ?= 60
FUZZ_RUNS    ?= -1
# a limit on each target's CPU time (0: none), for runs that share the machine
FUZZ_CPU_SECONDS ?= 0
FUZZ_SAN     = -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer
FUZZ_CFLAGS  = -std=c11 -O1 -g -D_GNU_SOURCE -Iinclude -Isrc -ffp-contract=off -fno-fast-math \
               -fno-strict-aliasing -pthread -Wall -Wextra -Wno-unused-parameter $(FUZZ_SAN) $(MPI_CFLAGS)
FUZZ_LIBS    = -ljansson -lpcre2-8 -luring -lmicrohttpd -lxxhash $(MPI_LIBS) -lm -pthread
# server targets (fuzz_server_*.c) also link src/server/ and the CLI files it
# calls (the option tables and engine parameters, its log and UTF-8 helpers,
# the progress lines), and need a model directory; they are left out while
# src/server/srv.h does not exist
FUZZ_SRV_SRC := $(wildcard src/server/*.c) $(wildcard src/cli/opts.c src/cli/common.c src/cli/util.c src/cli/progress.c)
FUZZ_NAMES   := $(patsubst tests/fuzz/fuzz_%.c,%,$(wildcard tests/fuzz/fuzz_*.c))
ifeq ($(wildcard src/server/srv.h),)
FUZZ_NAMES   := $(filter-out server_%,$(FUZZ_NAMES))
endif
FUZZ_TARGETS ?= $(FUZZ_NAMES)
FUZZ_OBJ     := $(LIB_SRC:%.c=$(FUZZ_BUILD)/obj/%.o)
FUZZ_SRV_OBJ := $(FUZZ_SRV_SRC:%.c=$(FUZZ_BUILD)/obj/%.o)
FUZZ_MODEL   := $(FUZZ_BUILD)/model
FUZZ_OSS_MODEL := $(FUZZ_BUILD)/oss_model
FUZZ_LIB     := $(FUZZ_BUILD)/libmoestream.a
FUZZ_BINS    := $(FUZZ_NAMES:%=$(FUZZ_BUILD)/fuzz_%)
FUZZ_SRV_BINS := $(filter $(FUZZ_BUILD)/fuzz_server_%,$(FUZZ_BINS))
FUZZ_LIB_BINS := $(filter-out $(FUZZ_SRV_BINS),$(FUZZ_BINS))
FUZZ_HDRS    := $(wildcard tests/fuzz/*.h)
# libFuzzer flags for every run: a hang of 10 s is a finding; 2 GB RSS cap
FUZZ_RUN_FLAGS ?= -timeout=10 -rss_limit_mb=2048 -print_final_stats=1

.PHONY: fuzz fuzz-smoke fuzz-build fuzz-clean

$(FUZZ_BUILD)/obj/%_avx2.o: %_avx2.c
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer-no-link $(AVX2_FLAGS) -MMD -MP -c $< -o $@

$(FUZZ_BUILD)/obj/%_avx512.o: %_avx512.c
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer-no-link $(AVX512_FLAGS) -MMD -MP -c $< -o $@

$(FUZZ_BUILD)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer-no-link -MMD -MP -c $< -o $@

$(FUZZ_LIB): $(FUZZ_OBJ)
	@mkdir -p $(dir $@)
	rm -f $@ && ar rcs $@ $^

# static pattern rules: the server objects and both kinds of binaries are
# explicit targets, so make never picks the library-only link for a server target
$(FUZZ_SRV_OBJ): $(FUZZ_BUILD)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer-no-link -MMD -MP -c $< -o $@

# the chat page's byte array: the main Makefile's generated header
# ($(BUILD)/gen/page_html.h, its own rule), so the page is not embedded twice
$(FUZZ_BUILD)/obj/src/server/page.o: $(BUILD)/gen/page_html.h
$(FUZZ_BUILD)/obj/src/server/page.o: FUZZ_CFLAGS += -I$(BUILD)/gen

$(FUZZ_SRV_BINS): $(FUZZ_BUILD)/fuzz_%: tests/fuzz/fuzz_%.c $(FUZZ_HDRS) $(FUZZ_SRV_OBJ) $(FUZZ_LIB)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -Werror -fsanitize=fuzzer -Itests/fuzz $< $(FUZZ_SRV_OBJ) $(FUZZ_LIB) $(FUZZ_LIBS) -o $@

$(FUZZ_LIB_BINS): $(FUZZ_BUILD)/fuzz_%: tests/fuzz/fuzz_%.c $(FUZZ_HDRS) $(FUZZ_LIB)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -Werror -fsanitize=fuzzer -Itests/fuzz $< $(FUZZ_LIB) $(FUZZ_LIBS) -o $@

# the tiny model of the targets that need one: the server targets (they add
# the fixture tokenizer to it) and the file-format targets (session, sums,
# packfile make their templates from it at startup)
$(FUZZ_MODEL)/config.json: tools/msgen.py tools/mslib.py tools/stwrite.py
	rm -rf $(FUZZ_MODEL)
	PYTHONDONTWRITEBYTECODE=1 /usr/bin/python3 tools/msgen.py $(FUZZ_MODEL) --preset a

# the server target's gpt-oss model (its own tokenizer, harmony chat format)
$(FUZZ_OSS_MODEL)/config.json: tools/ossgen.py tools/osslib.py tools/stwrite.py
	rm -rf $(FUZZ_OSS_MODEL)
	PYTHONDONTWRITEBYTECODE=1 /usr/bin/python3 tools/ossgen.py $(FUZZ_OSS_MODEL) --preset oa

fuzz-build: $(FUZZ_BINS) $(FUZZ_MODEL)/config.json $(FUZZ_OSS_MODEL)/config.json

# One target: fresh seeds into the working copy, run, report, keep the log.
# A JSON dictionary helps every target that reads JSON.
define FUZZ_RUN_ONE
	name=$(1); bin=$(FUZZ_BUILD)/fuzz_$$name; work=$(FUZZ_BUILD)/corpus/$$name; \
	log=$(FUZZ_BUILD)/logs/$$name.log; \
	mkdir -p $$work $(FUZZ_BUILD)/logs $(FUZZ_BUILD)/crashes; \
	for d in tests/fuzz/corpus/$$name tests/fuzz/grown/$$name; do \
	    if [ -d $$d ]; then cp -n $$d/* $$work/ 2>/dev/null; fi; done; \
	dict=""; [ -f tests/fuzz/dict/$$name.dict ] && dict=-dict=tests/fuzz/dict/$$name.dict; \
	MS_FUZZ_MODEL=$(FUZZ_MODEL) MS_FUZZ_OSS_MODEL=$(FUZZ_OSS_MODEL) \
	    bash tests/fuzz/cpu_limit.sh $(FUZZ_CPU_SECONDS) $$bin $(FUZZ_RUN_FLAGS) $$dict -max_total_time=$(2) -runs=$(FUZZ_RUNS) \
	    -artifact_prefix=$(FUZZ_BUILD)/crashes/$$name- $$work > $$log 2>&1; rc=$$?; \
	execs=$$(grep -o 'stat::number_of_executed_units: *[0-9]*' $$log | grep -o '[0-9]*$$'); \
	secs=$$(grep -o 'stat::average_exec_per_sec: *[0-9]*' $$log | grep -o '[0-9]*$$'); \
	cov=$$(grep -oE 'cov: [0-9]+' $$log | tail -n 1 | grep -oE '[0-9]+'); \
	files=$$(ls $$work | wc -l); \
	if [ $$rc -eq 0 ]; then \
	    echo "fuzz_$$name: ok, $${execs:-?} execs ($${secs:-?}/s), cov $${cov:-?}, corpus $$files files"; \
	else \
	    echo "fuzz_$$name: FAILED (exit $$rc) after $${execs:-?} execs; see $$log"; \
	    grep -m 3 -E 'ERROR|PROPERTY|SUMMARY|artifact' $$log | sed 's/^/    /'; \
	    fails=$$((fails + 1)); \
	fi;
endef

fuzz: fuzz-build
	@fails=0; \
	$(foreach t,$(FUZZ_TARGETS),$(call FUZZ_RUN_ONE,$(t),$(FUZZ_SECONDS))) \
	echo "fuzz: $(words $(FUZZ_TARGETS)) targets x $(FUZZ_SECONDS) s, $$fails failed"; \
	[ $$fails -eq 0 ]

fuzz-smoke:
	@$(MAKE) --no-print-directory fuzz FUZZ_SECONDS=10

fuzz-clean:
	rm -rf $(FUZZ_BUILD)

-include $(shell find $(FUZZ_BUILD)/obj -name '*.d' 2>/dev/null)
