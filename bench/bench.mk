# bench/bench.mk - benchmark targets, included by the main Makefile
# (`-include bench/bench.mk`). Nothing here runs in `make` or `make test`:
# benchmarks measure and report, tests never assert timings.
#
#   make bench          full run: checkpoint (6 layers x 64 experts, ~15 GB,
#                       generated once under $(BUILD)/bench-model), device
#                       benchmark, budget ladder, results + plot (~7 min on the
#                       2-core reference machine, +1 min the first time)
#   make bench BENCH_QUICK=1   2 layers x 32 experts, ~2.5 min
#   make bench-device   only the device benchmark on the bench checkpoint
#   make bench-kernels  memory read bandwidth (bench/membw.c), then the matvec
#                       kernels at the real shapes (bench/bench_kernels.c)
#   make bench-render   re-derive the table, plot and projection from results.json
#   make bench-oss      the gpt-oss ladder (bench/oss_ladder.py): the 20b-shaped checkpoint
#                       (~13.8 GB, generated once under $(BUILD)/bench-oss20b), rounds of the
#                       floor, trunk pinned and resident, probes around every run (~8 min);
#                       OSS_PRESET=120b: the 120b-shaped one (65.2 GB), the floor, 4G and 8G
#   build/bench/batchbench MODEL_DIR (--ids ... | --prompts FILE) --parallel 1,2,4 [--ram S] [--rounds R]
#                       [--speculate K|auto] [--draft-model DIR]
#                       sequences decoded together: s/step, tokens/s, bytes/token, tokens/pass per P
#   make bench-hash     XXH3 throughput on hot and cold 1 MiB blocks (bench/hashbench.c)
#   make bench-sample   one token's pick (ms_sampler_next) at gpt-oss's vocabulary, greedy and
#                       sampled (bench/samplebench.c)
#   make bench-mx-bound the core's ceiling for MXFP4 under the T16 tree: FMAs alone,
#                       + the decode's index work, + its lookups, weights in L1; then the
#                       decode from DRAM in the row-major and a linear layout (bench/mx_bound.c)
#   make bench-kernel-ab [AB_OLD=commit] [AB_ISA=avx512|avx2] [AB_ROUNDS=15] [AB_TABLES="avx512 avx512-l2"]
#                       MXFP4 kernels of src/kernels/x86/matvec_$(AB_ISA).c at AB_OLD
#                       (default HEAD) against the working tree, alternating in one
#                       process with the read bandwidth (bench/kernel_ab.c; ~1 s a round); AB_TABLES names the old
#                       and the new table (default: the file's main table both sides)
#
# Every knob of bench/bench.py is an environment variable (BENCH_*; see its
# header); make passes them through.

BENCH_PROGS := $(BUILD)/bench/devbench $(BUILD)/bench/decodebench $(BUILD)/bench/bench_kernels \
               $(BUILD)/bench/membw $(BUILD)/bench/batchbench $(BUILD)/bench/mx_bound \
               $(BUILD)/bench/hashbench $(BUILD)/bench/samplebench
BENCH_PY    := /usr/bin/python3 bench/bench.py

.PHONY: bench bench-device bench-kernels bench-render bench-progs bench-hash bench-kernel-ab \
        bench-mx-bound bench-sample bench-oss

bench-progs: $(BENCH_PROGS)

$(BUILD)/bench/devbench: bench/devbench.c $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) $(LDFLAGS) $< $(LIB) $(LDLIBS) -o $@

$(BUILD)/bench/decodebench: bench/decodebench.c $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) $(LDFLAGS) $< $(LIB) $(LDLIBS) -o $@

$(BUILD)/bench/batchbench: bench/batchbench.c $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) $(LDFLAGS) $< $(LIB) $(LDLIBS) -o $@

$(BUILD)/bench/bench_kernels: bench/bench_kernels.c $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) $(LDFLAGS) $< $(LIB) $(LDLIBS) -o $@

$(BUILD)/bench/membw: bench/membw.c
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) $(LDFLAGS) $< $(LDLIBS) -o $@

$(BUILD)/bench/hashbench: bench/hashbench.c
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) $(LDFLAGS) $< $(LDLIBS) -o $@

bench-hash: $(BUILD)/bench/hashbench
	$(BUILD)/bench/hashbench

$(BUILD)/bench/samplebench: bench/samplebench.c $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) $(LDFLAGS) $< $(LIB) $(LDLIBS) -o $@

bench-sample: $(BUILD)/bench/samplebench
	$(BUILD)/bench/samplebench

$(BUILD)/bench/mx_bound: bench/mx_bound.c
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) $(LDFLAGS) $< $(LDLIBS) -o $@

bench-mx-bound: $(BUILD)/bench/mx_bound
	$(BUILD)/bench/mx_bound

bench: $(BIN) $(BENCH_PROGS)
	BUILD=$(BUILD) $(BENCH_PY) all

bench-device: $(BIN) $(BUILD)/bench/devbench
	BUILD=$(BUILD) $(BENCH_PY) device

bench-kernels: $(BUILD)/bench/bench_kernels $(BUILD)/bench/membw
	@echo "load: $$(cut -d' ' -f1-3 /proc/loadavg)"
	$(BUILD)/bench/membw | tee $(BUILD)/bench/membw.txt
	$(BUILD)/bench/bench_kernels | tee $(BUILD)/bench/kernels.txt

bench-render:
	BUILD=$(BUILD) $(BENCH_PY) render

bench-oss: $(BIN) $(BUILD)/bench/devbench $(BUILD)/bench/decodebench $(BUILD)/bench/membw
	BUILD=$(BUILD) /usr/bin/python3 bench/oss_ladder.py run

AB_OLD    ?= HEAD
AB_ISA    ?= avx512
AB_ROUNDS ?= 15
AB_TABLES ?=
AB_FLAGS   = $(if $(filter avx2,$(AB_ISA)),$(AVX2_FLAGS),$(AVX512_FLAGS))

bench-kernel-ab: bench/kernel_ab.c $(LIB)
	@mkdir -p $(BUILD)/bench/ab
	git show $(AB_OLD):src/kernels/x86/matvec_$(AB_ISA).c > $(BUILD)/bench/ab/old_$(AB_ISA).c
	$(CC) $(ALL_CFLAGS) $(AB_FLAGS) -Dms_kern_$(AB_ISA)=ms_kern_ab_old -Dms_kern_$(AB_ISA)_l2=ms_kern_ab_old_l2 -c $(BUILD)/bench/ab/old_$(AB_ISA).c -o $(BUILD)/bench/ab/old.o
	$(CC) $(ALL_CFLAGS) $(AB_FLAGS) -Dms_kern_$(AB_ISA)=ms_kern_ab_new -Dms_kern_$(AB_ISA)_l2=ms_kern_ab_new_l2 -c src/kernels/x86/matvec_$(AB_ISA).c -o $(BUILD)/bench/ab/new.o
	$(CC) $(ALL_CFLAGS) $(LDFLAGS) bench/kernel_ab.c $(BUILD)/bench/ab/old.o $(BUILD)/bench/ab/new.o $(LIB) $(LDLIBS) -o $(BUILD)/bench/kernel_ab
	@echo "load: $$(cut -d' ' -f1-3 /proc/loadavg)"
	$(BUILD)/bench/kernel_ab $(AB_ROUNDS) $(AB_TABLES)
