# ShardLab's front door. `make demo` and `make test` each install what is missing, configure,
# build and run. Everything else is a convenience on top of CMake presets (CMakePresets.json).
JOBS    ?= $(shell nproc 2>/dev/null || echo 2)
BUILD   ?= build
PRESET  ?= cpu
SHARDLAB = $(BUILD)/bin/shardlab

# OpenBLAS picks its kernels for the CPU when it loads. Debian 12's 0.3.21 gives AMD Zen 4 its
# AVX-512 ones (core "Cooperlake"), tuned for Intel's 512-bit units; Zen 4 runs a 512-bit
# instruction as two 256-bit halves, and there OpenBLAS's AVX2 ("Haswell") sgemm is about 5%
# faster and a training step about 3% (docs/bench/perf-notes.md, "Seventh pass"). So on Zen 4
# (AuthenticAMD, family 25, AVX-512) every target runs with OPENBLAS_CORETYPE=Haswell, unless the
# variable is already set: a value of your own wins.
ifeq ($(origin OPENBLAS_CORETYPE),undefined)
  ifneq ($(shell grep -qm1 AuthenticAMD /proc/cpuinfo 2>/dev/null && grep -qm1 '^cpu family[[:space:]]*: 25$$' /proc/cpuinfo && grep -qm1 avx512f /proc/cpuinfo && echo zen4),)
    export OPENBLAS_CORETYPE := Haswell
  endif
endif

.PHONY: all deps configure build demo test cuda cuda-test clean help test-asan test-tsan

all: build

help:
	@echo "make demo     install deps, build, run the DP vs FSDP demo on 4 local ranks"
	@echo "make test     install deps, build, run every test (ctest)"
	@echo "make cuda     configure and build the CUDA + NCCL configuration in build-cuda/"
	@echo "make cuda-test  build it and run its GPU tests (each skips with a message without a GPU)"
	@echo "make gpu-bundle  build-cuda/gpu-bundle: what bench/gpu/device_check.sh runs on a lent GPU"
	@echo "make bench    run the benchmark suites and write docs/bench/ (make bench-quick: under a minute)"
	@echo "make sim-validate  simulated vs measured step and collective times -> docs/simulate-validation.md"
	@echo "make bench-peers  PyTorch DDP / FSDP2 beside ShardLab at the same shapes -> docs/bench/ (downloads PyTorch)"
	@echo "make lesson N=1  build and run a lesson (docs/lessons/)"
	@echo "make test-asan  build-asan/: AddressSanitizer + UBSan (+ LeakSanitizer), every test"
	@echo "make test-tsan  build-tsan/: ThreadSanitizer, every test"
	@echo "make fuzz     libFuzzer over the JSON readers, 10 min each (FUZZ_SECONDS, FUZZ_TARGETS)"
	@echo "make reliability-table  rerun the bad-input corpus, rewrite its table in docs/reliability.md"
	@echo "make docs-figures  rerun the commands behind every figure and picture of the pages, rewrite them (SLOW=1: also minutes-long runs)"
	@echo "make docs-check  regenerate every figure into a scratch tree, fail on any difference beyond timing (page:line)"
	@echo "make clean    remove build directories"

deps:
	@bash .ci/deps.sh

$(BUILD)/CMakeCache.txt: | deps
	cmake --preset $(PRESET)

configure: deps $(BUILD)/CMakeCache.txt

build: configure
	cmake --build $(BUILD) -j $(JOBS)

demo: build
	OPENBLAS_NUM_THREADS=1 $(SHARDLAB) demo

test: build
	cd $(BUILD) && ctest --output-on-failure -j $(JOBS) --timeout 600

build-cuda/CMakeCache.txt: | deps
	cmake --preset cuda

cuda: deps build-cuda/CMakeCache.txt
	cmake --build build-cuda -j $(JOBS)

cuda-test: cuda
	cd build-cuda && ctest --output-on-failure -j $(JOBS) -R '^cuda[.]'

# make gpu-bundle  what issue 16's device check needs on a lent GPU machine, made here (no GPU):
#                  the cuda preset's shardlab and shardlab_cuda_tests plus the Debian packages of
#                  OpenBLAS and Open MPI -> build-cuda/gpu-bundle (docs/gpu.md, "On a lent GPU")
.PHONY: gpu-bundle
gpu-bundle: deps
	JOBS=$(JOBS) bash bench/gpu/bundle.sh

clean:
	rm -rf build build-cuda build-debug build-asan build-tsan build-fuzz

# ---- sanitizers (tests/sanitizers/) -----------------------------------------------------------
# Configure the preset into build-asan/ or build-tsan/, build, run every test and fail on any
# sanitizer report, UBSan's included (the full output stays in build-*/ctest-sanitized.log).
test-asan: deps
	bash tests/sanitizers/run_sanitized.sh asan $(JOBS)

test-tsan: deps
	bash tests/sanitizers/run_sanitized.sh tsan $(JOBS)

# make fuzz  libFuzzer (clang 14, ASan + UBSan) over the JSON readers: cluster specs, checkpoint
#            indexes, run-directory lines, safetensors headers; FUZZ_SECONDS each (default 600),
#            FUZZ_TARGETS to pick some. build-fuzz/, not part of `make test` (tests/fuzz/).
FUZZ_SECONDS ?= 600
FUZZ_TARGETS ?=
.PHONY: fuzz
fuzz: build
	JOBS=$(JOBS) bash tests/fuzz/run_fuzz.sh $(BUILD)/bin $(FUZZ_SECONDS) $(FUZZ_TARGETS)

# The bad-input corpus (tests/corpus/) as the table in docs/reliability.md, between its markers.
.PHONY: reliability-table
reliability-table: build
	bash tests/corpus/run_corpus.sh $(BUILD)/bin $(BUILD)/corpus-table.md
	python3 tests/corpus/splice_table.py docs/reliability.md $(BUILD)/corpus-table.md

# ---- benchmarks (bench/run_bench.sh; docs/bench/README.md) ------------------------------------
# make bench        default suite, a few minutes on 2 cores: JSON, report.md and plots -> docs/bench/
# make bench-quick  quick suite, under a minute -> $(BUILD)/bench-quick/ (docs/bench/ untouched)
.PHONY: bench bench-quick
bench: build
	bash bench/run_bench.sh default $(BUILD)/bin docs/bench
bench-quick: build
	bash bench/run_bench.sh quick $(BUILD)/bin $(BUILD)/bench-quick

# make bench-peers  PyTorch DDP and FSDP2 (gloo, one process per rank) beside ShardLab local and MPI
#                   at small, N = 2, 4 x 128 tokens per rank, 5 repetitions -> docs/bench/ (about
#                   5 min). Not part of `make test`: the first run installs PyTorch from PyPI into
#                   $(BUILD)/peers-venv (about 6 GB), later runs reuse it. PEERS_ARGS="--help" lists
#                   the options (shapes, steps, repetitions).
PEERS_ARGS ?=
.PHONY: bench-peers
bench-peers: build
	/usr/bin/python3 bench/peers/run_peers.py --bin $(BUILD)/bin --out docs/bench \
	  --work $(BUILD)/peers --venv $(BUILD)/peers-venv $(PEERS_ARGS)

# make sim-validate  the simulator's predicted step and collective times against measured ones on
#                    this machine -> docs/simulate-validation.md (bench/sim_validate.py; about 30 min,
#                    each timed stage under /tmp/shardlab-build.lock). Not part of `make test`.
.PHONY: sim-validate
sim-validate: build
	python3 bench/sim_validate.py --bin $(BUILD)/bin --work $(BUILD)/sim-validate all

# ---- lessons (lessons/, docs/lessons/; this block belongs to the lessons) ------------------------
# make lesson N=3 [ARGS="--ranks 8"]   build and run lesson 3
# make lessons-table                   run all five on one model (N=4, G=2) -> docs/lessons/table.md
# make lesson-diffs                    docs/lessons/diffs/NN.diff: each lesson against the previous one
# make lesson-figures                  redraw docs/lessons/img/*.png (needs /usr/bin/python3 + matplotlib)
LESSONS       = 01_data_parallel 02_sharded_params 03_sharded_grads 04_sharded_optimizer 05_hybrid
N            ?= 1
LESSON        = $(filter 0$(N)_%,$(LESSONS))
TABLE_ARGS    = --model small --steps 10 --ranks 4
.PHONY: lesson lessons lessons-table lesson-diffs lesson-figures

lesson: configure
	@test -n "$(LESSON)" || { echo "make lesson N=<1..5>: no lesson $(N)"; exit 2; }
	cmake --build $(BUILD) -j $(JOBS) --target lesson_$(LESSON)
	OPENBLAS_NUM_THREADS=1 $(BUILD)/bin/lesson_$(LESSON) $(ARGS)

lessons: configure
	cmake --build $(BUILD) -j $(JOBS) $(foreach l,$(LESSONS),--target lesson_$(l))

lessons-table: lessons
	@mkdir -p $(BUILD)/lessons-table
	@set -e; for l in $(LESSONS); do \
	  extra=; case $$l in 05_*) extra="--group 2";; esac; \
	  echo "== lesson_$$l $(TABLE_ARGS) $$extra"; \
	  OPENBLAS_NUM_THREADS=1 $(BUILD)/bin/lesson_$$l $(TABLE_ARGS) $$extra \
	    --json $(BUILD)/lessons-table/$$l.json > $(BUILD)/lessons-table/$$l.txt \
	    || { cat $(BUILD)/lessons-table/$$l.txt; exit 1; }; \
	done
	python3 lessons/tools/lessons_table.py "make lessons-table" $(BUILD)/lessons-table/*.json \
	  > docs/lessons/table.md
	@cat docs/lessons/table.md

lesson-diffs:
	@mkdir -p docs/lessons/diffs
	@set -e; prev=; for l in $(LESSONS); do \
	  if [ -n "$$prev" ]; then \
	    diff -u --label lessons/$$prev/main.cpp --label lessons/$$l/main.cpp \
	      lessons/$$prev/main.cpp lessons/$$l/main.cpp > docs/lessons/diffs/$${l%%_*}.diff \
	      || [ $$? -eq 1 ]; \
	    echo "docs/lessons/diffs/$${l%%_*}.diff: $$prev -> $$l"; \
	  fi; prev=$$l; done

lesson-figures:
	/usr/bin/python3 lessons/tools/draw_figures.py docs/lessons/img

# ---- figures on pages (docs/figures.py, docs/docs_check.py; docs/README.md) ---------------------
# make docs-figures          rerun the commands behind every figure and rewrite it: the blocks
#                            between <!-- figure:NAME:begin/end --> markers, the pictures, the
#                            generated files (docs/lessons/table.md, diffs, docs/bench/report.md)
# make docs-figures SLOW=1   also the runs that take minutes (docs/data.md's trained losses)
# make docs-check            regenerate everything into $(BUILD)/docs-check/tree and fail on any
#                            difference from the committed pages beyond what is timing, listing
#                            page:line (FAST=1: without the minutes-long runs). Not part of
#                            `make test`: it trains and screenshots for minutes (docs/README.md).
.PHONY: docs-figures docs-check
docs-figures: build
	python3 docs/figures.py --build $(BUILD) $(if $(SLOW),--slow)

docs-check: build
	/usr/bin/python3 docs/docs_check.py --build $(BUILD) $(if $(FAST),--fast)
