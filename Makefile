# The two commands of the quick start: `make run` and `make test`. Each installs what is
# missing (Debian packages), configures and builds first.
BUILD ?= build
BUILD_TYPE ?= RelWithDebInfo
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=

.PHONY: all deps configure build test run demo executor-demo clean format \
	test-asan test-tsan fuzz-build fuzz fuzz-smoke

all: build

deps:
	@scripts/install-deps.sh

$(BUILD)/CMakeCache.txt: | deps
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) $(CMAKE_FLAGS)

configure: $(BUILD)/CMakeCache.txt

build: deps configure
	cmake --build $(BUILD) -j$(JOBS)

# The whole ctest suite; GPU tests skip where there is no GPU.
test: build
	cd $(BUILD) && ctest --output-on-failure -j$(JOBS) --timeout 600

# Sanitizer and fuzzing builds: clang-14, CUDA off, one build folder each (cmake/sanitizers.cmake).
CLANG ?= clang-14
CLANGXX ?= clang++-14
ASAN_BUILD ?= build-asan
TSAN_BUILD ?= build-tsan
FUZZ_BUILD ?= build-fuzz
FUZZ_SECONDS ?= 60
FUZZ_SMOKE_SECONDS ?= 20
FUZZERS = wire_fuzz kernel_validation_fuzz store_fuzz request_fuzz tenancy_fuzz resident_fuzz
SYMBOLIZER = /usr/lib/llvm-14/bin/llvm-symbolizer
SAN_CMAKE = CC=$(CLANG) CXX=$(CLANGXX) cmake -S . -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	-DKERNELSERVE_CUDA=OFF
ASAN_ENV = ASAN_OPTIONS=halt_on_error=1:detect_leaks=1:external_symbolizer_path=$(SYMBOLIZER) \
	LSAN_OPTIONS=suppressions=$(CURDIR)/tests/lsan.supp \
	UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1:external_symbolizer_path=$(SYMBOLIZER)
TSAN_ENV = TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1:external_symbolizer_path=$(SYMBOLIZER):suppressions=$(CURDIR)/tests/tsan.supp

# The suites but the GPU ones under ASan + UBSan (any error fails the test). Not the fuzz build:
# libFuzzer's coverage instrumentation makes the CPU kernels 3x slower again, past what the
# server tests' deadlines allow.
$(ASAN_BUILD)/CMakeCache.txt: | deps
	$(SAN_CMAKE) -B $(ASAN_BUILD) -DKERNELSERVE_SANITIZE=address,undefined

test-asan: deps $(ASAN_BUILD)/CMakeCache.txt
	cmake --build $(ASAN_BUILD) -j$(JOBS)
	cd $(ASAN_BUILD) && $(ASAN_ENV) ctest --output-on-failure -j$(JOBS) --timeout 900 -LE gpu

# The suites but the GPU ones under TSan, with an Abseil built with TSan
# (scripts/build-tsan-abseil.sh; once, some minutes) in place of Debian's; the suppressions of
# tests/tsan.supp and tests/tsan-ignorelist.txt only cover gRPC's own hand-offs. Left out:
# FullQueueIsResourceExhausted... needs two 4096-query attentions on the CPU within its 60 s
# deadlines, past what TSan's 6x slower kernels do.
TSAN_EXCLUDE = ServerShutdownTest.FullQueueIsResourceExhaustedAndExpiredWorkIsDropped
$(TSAN_BUILD)/CMakeCache.txt: | deps
	scripts/build-tsan-abseil.sh $(TSAN_BUILD)/abseil
	$(SAN_CMAKE) -B $(TSAN_BUILD) -DKERNELSERVE_SANITIZE=thread \
		-DKERNELSERVE_TSAN_ABSEIL=$(abspath $(TSAN_BUILD))/abseil

test-tsan: deps $(TSAN_BUILD)/CMakeCache.txt
	scripts/build-tsan-abseil.sh $(TSAN_BUILD)/abseil
	cmake --build $(TSAN_BUILD) -j$(JOBS)
	cd $(TSAN_BUILD) && $(TSAN_ENV) ctest --output-on-failure -j$(JOBS) --timeout 900 -LE 'gpu|fuzz' \
		-E '$(TSAN_EXCLUDE)'

# The libFuzzer harnesses of tests/fuzz (ASan + UBSan), each replaying its saved reproducers,
# then run for FUZZ_SECONDS over a copy of its corpus (scripts/fuzz.sh); fuzz-smoke runs each
# for FUZZ_SMOKE_SECONDS. Builds only the harnesses and the libraries they need.
$(FUZZ_BUILD)/CMakeCache.txt: | deps
	$(SAN_CMAKE) -B $(FUZZ_BUILD) -DKERNELSERVE_SANITIZE=address,undefined -DKERNELSERVE_FUZZ=ON

fuzz-build: deps $(FUZZ_BUILD)/CMakeCache.txt
	cmake --build $(FUZZ_BUILD) -j$(JOBS) --target $(FUZZERS)

fuzz: fuzz-build
	scripts/fuzz.sh $(FUZZ_BUILD) $(FUZZ_SECONDS)

fuzz-smoke: fuzz-build
	scripts/fuzz.sh $(FUZZ_BUILD) $(FUZZ_SMOKE_SECONDS)

# Starts the server on embedded defaults: 127.0.0.1:50051 (metrics on 127.0.0.1:9464), configs
# in ~/.cache/kernelserve/configs.json, the GPUs when there are any, else the CPU.
run: build
	$(BUILD)/server/kernelserve-server $(ARGS)

# Starts the server on free ports, runs the CLI against it for both kernels, stops it.
demo: build
	scripts/demo.sh $(BUILD)

# The executor alone, in process, without the server.
executor-demo: build
	$(BUILD)/tools/kernelserve-demo $(ARGS)

format:
	clang-format -i $$(git ls-files '*.h' '*.cc' '*.cu' '*.cuh')

clean:
	rm -rf $(BUILD)
