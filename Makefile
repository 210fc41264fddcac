# The two commands of the README: `make demo` and `make test`. Each installs what is missing
# (Debian packages), configures a Release build in $(BUILD) and runs.
BUILD ?= build
JOBS ?= $(shell nproc)
CMAKE_ARGS ?=
CTEST_ARGS ?=

.PHONY: all deps configure build test demo bench gpu-check clean

all: build

deps:
	@scripts/ensure-deps.sh

configure: deps
	cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release $(CMAKE_ARGS)

build: configure
	cmake --build $(BUILD) -j $(JOBS)

test: build
	cd $(BUILD) && ctest -j $(JOBS) --output-on-failure $(CTEST_ARGS)

demo: build
	scripts/demo.sh $(BUILD)

bench: build
	bench/run.sh $(BUILD)

gpu-check:
	scripts/gpu-check.sh

clean:
	rm -rf $(BUILD)
