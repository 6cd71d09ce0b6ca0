# Sheaf — plain GNU make. Build variants live side by side under build/:
#   make                          release: -O3, -march=native when the compiler accepts it
#   make BUILD=portable           -O2 for the baseline ISA (kernels still pick AVX2/AVX-512 at run time)
#   make BUILD=debug              -O0 -g3
#   make SAN=address,undefined    sanitizers, in a directory of their own (combines with BUILD)
#   make WERROR=1                 warnings are errors (CI)
#   make V=1                      print full compiler command lines
# Targets: all (lib, cli, tests, examples), run, run-infer, test, fuzz, bench-pool, install, clean. See README.md.

BUILD   ?= release
SAN     ?=
WERROR  ?= 0
PREFIX  ?= /usr/local
DESTDIR ?=
FUZZ_SECONDS ?= 60
BENCH_ARGS ?=

comma := ,
ifeq ($(V),1)
Q :=
say = @true
else
Q := @
say = @printf '  %-6s %s\n' $(1) $(2)
endif
# Cross builds (e.g. CC=aarch64-linux-gnu-gcc) get the target in the directory
# name, and clang builds a -clang suffix, so gcc and clang objects never mix.
ARCH := $(shell $(CC) -dumpmachine 2>/dev/null | cut -d- -f1)
CC_TAG := $(if $(findstring clang,$(shell $(CC) --version 2>/dev/null | head -n 1)),-clang)
BUILDDIR := build/$(BUILD)$(if $(SAN),-san-$(subst $(comma),-,$(SAN)))$(if $(filter-out x86_64,$(ARCH)),-$(ARCH))$(CC_TAG)

WARN := -Wall -Wextra -Wshadow -Wstrict-prototypes -Wmissing-prototypes -Wvla \
        -Wpointer-arith -Wformat=2 -Wundef -Wcast-qual -Wnull-dereference \
        -Wno-unused-parameter
ifeq ($(WERROR),1)
WARN += -Werror
endif

NATIVE := $(shell $(CC) -march=native -E -x c /dev/null >/dev/null 2>&1 && echo -march=native)
ifeq ($(BUILD),release)
OPT := -O3 $(NATIVE) -DNDEBUG
else ifeq ($(BUILD),portable)
OPT := -O2 -DNDEBUG
else ifeq ($(BUILD),debug)
OPT := -O0 -g3
else
$(error BUILD=$(BUILD): expected release, portable or debug)
endif
OPT += -g

SANFLAGS := $(if $(SAN),-fsanitize=$(SAN) -fno-omit-frame-pointer -fno-sanitize-recover=all)
CFLAGS_ALL := -std=c11 -D_GNU_SOURCE -fPIC $(OPT) $(WARN) $(SANFLAGS) -Iinclude -Isrc $(CFLAGS)
LDFLAGS_ALL := $(SANFLAGS) $(LDFLAGS)
LDLIBS_ALL := -lm -lpthread -ldl $(LDLIBS)

# Library: every .c under src/<module>/ (one folder per pipeline stage; the
# built-in C models of src/models/ included).
LIB_SRCS   := $(sort $(wildcard src/*/*.c))
CLI_SRCS   := $(sort $(wildcard cli/*.c))
TEST_SRCS  := $(sort $(wildcard tests/*.c))
# Benchmarks: one program per bench/bench_*.c; bench_util.c is what the model
# benchmarks share, linked into every one.
BENCH_UTIL := bench/bench_util.c
# bench_dynamic.c also links bench/bench_dynamic_models.c (more rows of its
# table) when that file exists: it is no program of its own.
BENCH_DYN_EXTRA := $(wildcard bench/bench_dynamic_models.c)
BENCH_SRCS := $(filter-out $(BENCH_UTIL) $(BENCH_DYN_EXTRA),$(sort $(wildcard bench/bench_*.c)))
# Standalone programs on the public API (examples/*.c): built by `all`, so
# they cannot rot, and linked into nothing else.
EX_SRCS    := $(sort $(wildcard examples/*.c))

obj = $(patsubst %.c,$(BUILDDIR)/obj/%.o,$(1))
LIB_OBJS  := $(call obj,$(LIB_SRCS))
CLI_OBJS  := $(call obj,$(CLI_SRCS))
TEST_OBJS := $(call obj,$(TEST_SRCS))
BENCH_UTIL_OBJ := $(call obj,$(BENCH_UTIL))

LIB_A   := $(BUILDDIR)/libsheaf.a
LIB_SO  := $(BUILDDIR)/libsheaf.so
SHEAF   := $(BUILDDIR)/sheaf
TESTBIN := $(BUILDDIR)/sheaf-tests
BENCHES := $(patsubst bench/%.c,$(BUILDDIR)/bench/%,$(BENCH_SRCS))
EXAMPLES := $(patsubst examples/%.c,$(BUILDDIR)/examples/%,$(EX_SRCS))

EWT_TEST := data/ud_english_ewt/en_ewt-ud-test.conllu

.PHONY: all lib cli tests benches examples run test fuzz fuzz-build fuzz-check-cc bench-pool bench-gemm bench-vmath bench-encoder bench-codegen-peers install-dynet install uninstall clean bench-dynamic bench-train run-infer
all: lib cli tests examples

lib: $(LIB_A) $(LIB_SO)
cli: $(SHEAF)
tests: $(TESTBIN)
benches: $(BENCHES)
examples: $(EXAMPLES)

# The compiler and its flags, kept in $(BUILDDIR)/cflags: when they change
# (WERROR=1 after a plain build, CFLAGS=..., another CC of the same name),
# every object and example is rebuilt, so `make WERROR=1` checks every file
# rather than only those changed since the last build. The recipe runs every
# time but rewrites the file only when the flags differ, so its date moves
# (and the objects rebuild) only then.
FLAGS_STAMP := $(BUILDDIR)/cflags
FLAGS_NOW := $(CC) $(CFLAGS_ALL) | $(LDFLAGS_ALL)
$(FLAGS_STAMP): FORCE
	@mkdir -p $(dir $@)
	@[ "$$(cat $@ 2>/dev/null)" = '$(FLAGS_NOW)' ] || printf '%s\n' '$(FLAGS_NOW)' > $@
.PHONY: FORCE
FORCE:

$(BUILDDIR)/obj/%.o: %.c $(FLAGS_STAMP)
	@mkdir -p $(dir $@)
	$(call say,CC,$<)
	$(Q)$(CC) $(CFLAGS_ALL) -MMD -MP -c $< -o $@

# The library's objects export nothing by default: libsheaf.so exports only
# the functions the public headers mark SHEAF_API (scripts/check_exports.sh
# checks it). The CLI, tests and benches link libsheaf.a (the fuzzers the
# objects themselves), where the internal sh_* functions stay reachable.
$(LIB_OBJS): CFLAGS_ALL += -fvisibility=hidden

$(LIB_A): $(LIB_OBJS)
	@mkdir -p $(dir $@)
	$(call say,AR,$@)
	$(Q)rm -f $@
	$(Q)$(AR) rcs $@ $^

$(LIB_SO): $(LIB_OBJS)
	$(call say,LD,$@)
	$(Q)$(CC) -shared -Wl,-soname,libsheaf.so.0 $(LDFLAGS_ALL) -o $@ $^ $(LDLIBS_ALL)

$(SHEAF): $(CLI_OBJS) $(LIB_A)
	$(call say,LD,$@)
	$(Q)$(CC) $(LDFLAGS_ALL) -o $@ $(CLI_OBJS) $(LIB_A) $(LDLIBS_ALL)

$(TESTBIN): $(TEST_OBJS) $(LIB_A)
	$(call say,LD,$@)
	$(Q)$(CC) $(LDFLAGS_ALL) -o $@ $(TEST_OBJS) $(LIB_A) $(LDLIBS_ALL)

$(BUILDDIR)/bench/%: $(BUILDDIR)/obj/bench/%.o $(BENCH_UTIL_OBJ) $(LIB_A)
	@mkdir -p $(dir $@)
	$(call say,LD,$@)
	$(Q)$(CC) $(LDFLAGS_ALL) -o $@ $< $(BENCH_UTIL_OBJ) $(LIB_A) $(LDLIBS_ALL)

# The examples see the public headers only (include/), as a program built
# against an installed Sheaf would.
$(BUILDDIR)/examples/%: examples/%.c include/sheaf.h include/sheaf_graph.h include/sheaf_program.h include/sheaf_kernel.h include/sheaf_train.h $(LIB_A) $(FLAGS_STAMP)
	@mkdir -p $(dir $@)
	$(call say,CC,$<)
	$(Q)$(CC) -std=c11 $(OPT) $(WARN) $(SANFLAGS) -Iinclude $(CFLAGS) $(LDFLAGS_ALL) -o $@ $< $(LIB_A) $(LDLIBS_ALL)

$(BUILDDIR)/bench/bench_dynamic: $(BUILDDIR)/obj/bench/bench_dynamic.o $(call obj,$(BENCH_DYN_EXTRA)) $(BENCH_UTIL_OBJ) $(LIB_A)
	@mkdir -p $(dir $@)
	$(call say,LD,$@)
	$(Q)$(CC) $(LDFLAGS_ALL) -o $@ $(filter %.o,$^) $(LIB_A) $(LDLIBS_ALL)

# Any bench/bench_NAME.c runs as `make bench-NAME BENCH_ARGS='...'` (the
# explicit rules below add setup notes for some).
bench-%: $(BUILDDIR)/bench/bench_%
	$< $(BENCH_ARGS)

# The main job: trains the BiLSTM tagger (hidden 64, embedding 64, Adam lr
# 0.005, 32 sentences per update) on the bundled EWT train split for at most
# RUN_SECONDS of training (the epoch in progress is cut at the time limit),
# printing the loss and the dev accuracy per epoch; saves the weights of the
# epoch with the best dev accuracy (--keep-best) and the vocabulary to $(BUILDDIR)/out/bilstm-ewt.{safetensors,vocab}; then tags the
# test split with them and prints the UPOS accuracy (docs/TRAINING.md).
RUN_SECONDS ?= 100
EWT_TRAIN := data/ud_english_ewt/en_ewt-ud-train.min.conllu
EWT_DEV   := data/ud_english_ewt/en_ewt-ud-dev.min.conllu
RUN_SIZES := --hidden 64 --embed 64
run: $(SHEAF)
	@mkdir -p $(BUILDDIR)/out
	$(SHEAF) train bilstm --data $(EWT_TRAIN) --dev $(EWT_DEV) $(RUN_SIZES) --batch 32 \
	  --optimizer adam --lr 0.005 --epochs 20 --time-limit $(RUN_SECONDS) --keep-best --seed 0 \
	  --out $(BUILDDIR)/out/bilstm-ewt.safetensors
	$(SHEAF) run bilstm --data $(EWT_TEST) $(RUN_SIZES) --weights $(BUILDDIR)/out/bilstm-ewt.safetensors \
	  --vocab $(BUILDDIR)/out/bilstm-ewt.vocab

# The inference demo (the main job before training landed): the binary
# TreeLSTM (hidden 256, embedding 256, seeded weights) over the bundled EWT
# trees, binarized, 64 trees per batch, policy sheaf; prints throughput and
# the runtime's counters and writes one line per tree (index, 5 class
# log-probabilities) to $(BUILDDIR)/out/treelstm-ewt.txt.
run-infer: $(SHEAF)
	@mkdir -p $(BUILDDIR)/out
	$(SHEAF) run treelstm --data $(EWT_TEST) --hidden 256 --batch 64 --policy sheaf \
	  --out $(BUILDDIR)/out/treelstm-ewt.txt

# The test runner prints one line per failure and ends with "N passed, N failed"
# (the examples are run by one of the tests). Tests run TEST_JOBS at a time
# (default: one per CPU), each in its own child.
TEST_JOBS ?= $(shell nproc 2>/dev/null || echo 1)
test: $(TESTBIN) $(SHEAF) $(EXAMPLES)
	SHEAF_BIN=$(SHEAF) $(TESTBIN) -j$(TEST_JOBS) $(TEST_ARGS)

# Model benchmarks against PyTorch (bench/*_torch.py) and DyNet
# (bench/*_dynet.cc), measured in the same run: PyTorch and NumPy are
# installed first when `python3 -c 'import torch, numpy'` fails
# (scripts/install_torch.sh); DyNet 2.1.2's C++ library and the DyNet peers
# are built into build/peers/dynet (scripts/install_dynet.sh: once, a few
# minutes; cached after). A peer that cannot be had is skipped and the
# output says why. BENCH_ARGS e.g. '--quick --json out.json'.
bench-treelstm bench-bilstm: bench-%: $(BUILDDIR)/bench/bench_%
	@sh scripts/install_torch.sh || echo "bench-$*: PyTorch unavailable; the peers are skipped"
	@sh scripts/install_dynet.sh || echo "bench-$*: DyNet unavailable; its columns are skipped"
	$< $(BENCH_ARGS)

# Generated kernels (default and tuned schedules) next to TVM and Halide,
# same shapes, paired rounds in one run (bench/bench_codegen_peers.c drives
# bench/codegen_tvm.py and bench/codegen_halide.py as --serve co-processes):
# both are installed first into build/peers/venv (scripts/install_tvm.sh,
# install_halide.sh); a peer that cannot be had is named in the output.
# BENCH_ARGS e.g. '--quick', '--rounds 21 --budget 30', '--records FILE'.
bench-codegen-peers: $(BUILDDIR)/bench/bench_codegen_peers
	@sh scripts/install_tvm.sh >/dev/null || echo "bench-codegen-peers: TVM unavailable; its column says so"
	@sh scripts/install_halide.sh >/dev/null || echo "bench-codegen-peers: Halide unavailable; its column says so"
	$< $(BENCH_ARGS)

# Models whose control flow depends on computed values (greedy decoder, beam
# search, and the rows of bench/bench_dynamic_models.c), 64 EWT sentences, 1
# thread: Sheaf batched with fibers vs one instance at a time vs DyNet's best
# --dynet-autobatch (built by scripts/install_dynet.sh; skipped, saying why,
# when it cannot be). BENCH_ARGS e.g. '--quick', '--no-dynet'.
bench-dynamic: $(BUILDDIR)/bench/bench_dynamic
	@sh scripts/install_dynet.sh || echo "bench-dynamic: DyNet unavailable; its column is skipped"
	$< $(BENCH_ARGS)

# The rows of bench/bench_dynamic_models.c (early-exit classifier, shift-reduce
# parser) as a program of their own (-DBENCH_DYN_MODELS_MAIN), built by
# `benches`; `make bench-dynamic-models` runs it (BENCH_ARGS e.g. '--quick',
# '--hidden 128', '--no-dynet'). Their DyNet peers (bench/early_exit_dynet.cc,
# bench/parser_dynet.cc) are compiled against the library scripts/install_dynet.sh
# builds (target dynet-peers-dynamic; bench-dynamic and bench-dynamic-models
# build them first, and go on without them when DyNet cannot be had).
BENCH_DYN_MODELS := $(BUILDDIR)/bench/bench_dynamic_models
benches: $(BENCH_DYN_MODELS)
$(BENCH_DYN_MODELS): bench/bench_dynamic_models.c bench/bench_dynamic.h $(BENCH_UTIL_OBJ) $(LIB_A)
	@mkdir -p $(dir $@)
	$(call say,CC,$<)
	$(Q)$(CC) $(CFLAGS_ALL) -DBENCH_DYN_MODELS_MAIN $(LDFLAGS_ALL) -o $@ $< $(BENCH_UTIL_OBJ) $(LIB_A) $(LDLIBS_ALL)

DYNET_DIR ?= build/peers/dynet
DYNET_PEERS_DYN := $(DYNET_DIR)/bin/early_exit_dynet $(DYNET_DIR)/bin/parser_dynet
.PHONY: dynet-peers-dynamic bench-dynamic-models
dynet-peers-dynamic:
	@sh scripts/install_dynet.sh && $(MAKE) --no-print-directory $(DYNET_PEERS_DYN) || \
	  echo "dynet-peers-dynamic: DyNet unavailable; the early-exit and parser peers are skipped"
$(DYNET_PEERS_DYN): $(DYNET_DIR)/bin/%: bench/%.cc bench/dynet_peer.h $(DYNET_DIR)/build/dynet/libdynet.so
	@mkdir -p $(dir $@)
	$(call say,CXX,$<)
	$(Q)g++ -std=c++11 -O3 $(NATIVE) -DNDEBUG -DEIGEN_FAST_MATH -Ibench -I$(DYNET_DIR)/dyNET-2.1.2 \
	  -I$(DYNET_DIR)/build -I$${EIGEN3_INCLUDE_DIR:-/usr/include/eigen3} -o $@ $< \
	  -L$(DYNET_DIR)/build/dynet -ldynet -Wl,-rpath,$(abspath $(DYNET_DIR)/build/dynet)
bench-dynamic: dynet-peers-dynamic
bench-dynamic-models: $(BENCH_DYN_MODELS) dynet-peers-dynamic
	$< --dynet-dir $(DYNET_DIR) $(BENCH_ARGS)

# Training throughput: the BiLSTM tagger trained by Sheaf, by its PyTorch
# peer (bench/train_torch.py: per-sentence and packed) and by its DyNet peer
# (bench/bilstm_train_dynet.cc: autobatch 0, 1, 2, from Sheaf's initial
# weights) on the bundled EWT test split, same sizes, Adam, batches of 64,
# same number of updates; then
# the TreeLSTM (bench_train_tree: the root word's UPOS class of the EWT
# train split, batches of 32 trees) against PyTorch per-tree and
# level-batched and DyNet (autobatch 0, 1, 2; when scripts/install_dynet.sh
# built it), with the dev accuracy each reaches; the ratios printed in one
# run. BENCH_ARGS e.g. '--threads 1 --updates 20 --reps 2 --cpu-time' (every
# system on its process's CPU clock: the machine may be shared), plus
# '--lazy-emb' for lazy embedding-row updates in every system (DyNet's
# default; PyTorch's SparseAdam; sheaf_optimizer_lazy_rows).
bench-train: $(BUILDDIR)/bench/bench_train $(BUILDDIR)/bench/bench_train_tree
	@sh scripts/install_torch.sh || echo "bench-train: PyTorch unavailable; the peers are skipped"
	@sh scripts/install_dynet.sh || echo "bench-train: DyNet unavailable; its rows are skipped"
	$(BUILDDIR)/bench/bench_train $(BENCH_ARGS)
	$(BUILDDIR)/bench/bench_train_tree $(BENCH_ARGS)

# DyNet 2.1.2 (C++ library from PyPI's sdist) and the DyNet peers alone.
install-dynet:
	sh scripts/install_dynet.sh

# OpenMP is a peer in the pool benchmark only (the library never uses it).
OPENMP := $(shell echo 'int main(void){return 0;}' | $(CC) -fopenmp -x c - -o /dev/null 2>/dev/null && echo -fopenmp)
$(BUILDDIR)/obj/bench/bench_pool.o: CFLAGS_ALL += $(OPENMP)
# AArch64 gcc 12 at -O3 crashes (internal compiler error in
# vect_transform_reduction) on the tests' fmax/fabs error reductions; the tests
# need no vectorizer, so their objects are built without it there.
ifeq ($(ARCH)$(CC_TAG),aarch64)
$(TEST_OBJS): CFLAGS_ALL += -fno-tree-vectorize
endif
$(BUILDDIR)/bench/bench_pool: LDFLAGS_ALL += $(OPENMP)

bench-pool: $(BUILDDIR)/bench/bench_pool
	$< $(BENCH_ARGS)

# GEMM vs OpenBLAS in one run (OpenBLAS is loaded at run time;
# scripts/install_openblas.sh installs Debian's libopenblas-dev when missing). BENCH_ARGS e.g. '--quick --json out.json'.
bench-gemm: $(BUILDDIR)/bench/bench_gemm
	@sh scripts/install_openblas.sh || \
	  echo "bench-gemm: OpenBLAS not available; timing Sheaf only (its columns are '-')"
	$< $(BENCH_ARGS)

# Vector math: max ulp over all 2^32 inputs per function and ISA, and
# throughput vs a scalar libm loop. BENCH_ARGS e.g. '--quick' (sampled sweep).
bench-vmath: $(BUILDDIR)/bench/bench_vmath
	$< $(BENCH_ARGS)

# Ragged transformer encoder vs PyTorch padded / nested / per-sequence, same
# weights and inputs (PyTorch peers need python3 with torch and numpy; without
# them only Sheaf is timed). BENCH_ARGS e.g. '--quick --json out.json'.
bench-encoder: $(BUILDDIR)/bench/bench_encoder
	$< $(BENCH_ARGS)

# Fuzzing (clang + libFuzzer): each target runs FUZZ_SECONDS under ASan+UBSan.
# FUZZ_SAN= (empty) builds without sanitizers in build/fuzz-nosan: several
# times the executions per second, for long searches (a crash found there is
# then replayed under the sanitizer build).
FUZZ_CC ?= clang
FUZZ_SAN ?= address,undefined
FUZZ_DIR := build/fuzz$(if $(FUZZ_SAN),,-nosan)
FUZZ_SRCS := $(sort $(wildcard fuzz/fuzz_*.c))
FUZZ_BINS := $(patsubst fuzz/%.c,$(FUZZ_DIR)/%,$(FUZZ_SRCS))
FUZZ_CFLAGS := -std=c11 -D_GNU_SOURCE $(if $(FUZZ_SAN),-O1,-O2) -g -fsanitize=fuzzer$(if $(FUZZ_SAN),$(comma)$(FUZZ_SAN)) \
               $(if $(FUZZ_SAN),-fno-sanitize-recover=all) -Iinclude -Isrc

# The targets reach the stages up to the language (base, io, tensor,
# kernels, runtime, models, ragged, lang): the objects of those go into
# $(FUZZ_DIR)/libsheaf.a, and each target links what it uses from there.
# The later stages, codegen (kernel compilation) and train (autodiff,
# optimizers), are reached by no target: not compiled here (a third of the
# library's code, and of the fuzz build's time). lang/interp.c and
# lang/bind_kernels.c call the kernel API, but no target pulls them in; a
# target that comes to need a module left out fails to link, naming the
# symbol: add the module to FUZZ_MODULES.
FUZZ_MODULES := base io tensor kernels runtime models ragged lang
FUZZ_LIB_SRCS := $(filter $(patsubst %,src/%/%,$(FUZZ_MODULES)),$(LIB_SRCS))
FUZZ_OBJS := $(patsubst %.c,$(FUZZ_DIR)/obj/%.o,$(FUZZ_LIB_SRCS))
FUZZ_LIB := $(FUZZ_DIR)/libsheaf.a
.SECONDARY: $(FUZZ_OBJS)

fuzz-build: $(FUZZ_BINS)
fuzz-check-cc:
	@command -v $(FUZZ_CC) >/dev/null || { echo "fuzz: $(FUZZ_CC) not found; run: apt-get install -y clang libclang-rt-14-dev"; exit 1; }
$(FUZZ_DIR)/obj/%.o: %.c | fuzz-check-cc
	@mkdir -p $(dir $@)
	$(call say,CC-FZ,$<)
	$(Q)$(FUZZ_CC) $(subst -fsanitize=fuzzer,-fsanitize=fuzzer-no-link,$(FUZZ_CFLAGS)) -MMD -MP -c $< -o $@
# clang 14 spends minutes (120+ s CPU, against 10 s for ASan alone and 8 s
# for UBSan alone) on the AVX-512 GEMM micro-kernels (one per row count
# 1..14, unrolled) with ASan and UBSan together: most of the fuzz build's
# time. That file is built with ASan alone here. It runs on AVX-512 hosts
# only, and UBSan checks it in the ASan+UBSan test suite (tests/test_gemm.c:
# every size, every ISA the host has).
$(FUZZ_DIR)/obj/src/kernels/gemm_avx512.o: FUZZ_CFLAGS += $(if $(FUZZ_SAN),-fno-sanitize=undefined)
$(FUZZ_LIB): $(FUZZ_OBJS)
	$(call say,AR,$@)
	$(Q)rm -f $@
	$(Q)$(AR) rcs $@ $^
$(FUZZ_DIR)/%: fuzz/%.c fuzz/fuzz_common.h $(FUZZ_LIB)
	$(call say,LD,$@)
	$(Q)$(FUZZ_CC) $(FUZZ_CFLAGS) -o $@ $(filter %.c %.o,$^) $(FUZZ_LIB) -lm -lpthread -ldl
# the graph fuzzer's generator is shared with its seeded test
$(FUZZ_DIR)/fuzz_graph: $(FUZZ_DIR)/obj/tests/graph_fuzz.o
# the flag parser fuzzer links the CLI's parser (cli/flags.c) alone
$(FUZZ_DIR)/fuzz_flags: $(FUZZ_DIR)/obj/cli/flags.o

fuzz: fuzz-build
	FUZZ_SECONDS=$(FUZZ_SECONDS) sh fuzz/run.sh $(FUZZ_DIR)

install: $(LIB_A) $(LIB_SO) $(SHEAF)
	install -d $(DESTDIR)$(PREFIX)/include $(DESTDIR)$(PREFIX)/lib/pkgconfig $(DESTDIR)$(PREFIX)/bin
	install -m 644 include/sheaf.h include/sheaf_graph.h include/sheaf_program.h include/sheaf_kernel.h include/sheaf_train.h $(DESTDIR)$(PREFIX)/include/
	install -m 644 $(LIB_A) $(DESTDIR)$(PREFIX)/lib/
	install -m 755 $(LIB_SO) $(DESTDIR)$(PREFIX)/lib/libsheaf.so.0
	ln -sf libsheaf.so.0 $(DESTDIR)$(PREFIX)/lib/libsheaf.so
	install -m 755 $(SHEAF) $(DESTDIR)$(PREFIX)/bin/
	sed -e 's|@PREFIX@|$(PREFIX)|g' -e 's|@VERSION@|$(shell sed -n 's/^#define SHEAF_VERSION_STRING "\(.*\)"/\1/p' include/sheaf.h)|g' \
	    sheaf.pc.in > $(DESTDIR)$(PREFIX)/lib/pkgconfig/sheaf.pc

uninstall:
	rm -f $(DESTDIR)$(PREFIX)/include/sheaf.h $(DESTDIR)$(PREFIX)/include/sheaf_graph.h $(DESTDIR)$(PREFIX)/include/sheaf_program.h $(DESTDIR)$(PREFIX)/include/sheaf_kernel.h $(DESTDIR)$(PREFIX)/include/sheaf_train.h $(DESTDIR)$(PREFIX)/lib/libsheaf.a \
	      $(DESTDIR)$(PREFIX)/lib/libsheaf.so $(DESTDIR)$(PREFIX)/lib/libsheaf.so.0 \
	      $(DESTDIR)$(PREFIX)/bin/sheaf $(DESTDIR)$(PREFIX)/lib/pkgconfig/sheaf.pc

clean:
	rm -rf build

-include $(LIB_OBJS:.o=.d) $(FUZZ_OBJS:.o=.d) $(CLI_OBJS:.o=.d) $(TEST_OBJS:.o=.d) $(patsubst %.c,$(BUILDDIR)/obj/%.d,$(BENCH_SRCS) $(BENCH_UTIL))
