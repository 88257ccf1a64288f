# The two commands of the quick start: `make run` and `make test`. Each installs what is
# missing (Debian packages), configures and builds first.
BUILD ?= build
BUILD_TYPE ?= RelWithDebInfo
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=

.PHONY: all deps configure build test run clean format

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

# Runs the executor demo on embedded defaults (CPU without a GPU, configs in a local file).
run: build
	$(BUILD)/tools/kernelserve-demo $(ARGS)

format:
	clang-format -i $$(git ls-files '*.h' '*.cc' '*.cu' '*.cuh')

clean:
	rm -rf $(BUILD)
