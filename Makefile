# ShardLab's front door. `make demo` and `make test` each install what is missing, configure,
# build and run. Everything else is a convenience on top of CMake presets (CMakePresets.json).
JOBS    ?= $(shell nproc 2>/dev/null || echo 2)
BUILD   ?= build
PRESET  ?= cpu
SHARDLAB = $(BUILD)/bin/shardlab

.PHONY: all deps configure build demo test cuda cuda-test clean help

all: build

help:
	@echo "make demo     install deps, build, run the DP vs FSDP demo on 4 local ranks"
	@echo "make test     install deps, build, run every test (ctest)"
	@echo "make cuda     configure and build the CUDA + NCCL configuration in build-cuda/"
	@echo "make cuda-test  build it and run its GPU tests (each skips with a message without a GPU)"
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

clean:
	rm -rf build build-cuda build-debug build-asan build-tsan

# ---- benchmarks (bench/run_bench.sh; docs/bench/README.md) ------------------------------------
# make bench        default suite, a few minutes on 2 cores: JSON, report.md and plots -> docs/bench/
# make bench-quick  quick suite, under a minute -> $(BUILD)/bench-quick/ (docs/bench/ untouched)
.PHONY: bench-quick
bench: build
	bash bench/run_bench.sh default $(BUILD)/bin docs/bench
bench-quick: build
	bash bench/run_bench.sh quick $(BUILD)/bin $(BUILD)/bench-quick
