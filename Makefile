# The two commands of the quick start: `make run` and `make test`. Each installs what is
# missing (Debian packages), configures and builds first.
BUILD ?= build
BUILD_TYPE ?= RelWithDebInfo
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=

.PHONY: all deps configure build test run demo executor-demo clean format

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
