# cuwire developer commands. `make test` is what CI runs (.ci/run); every target sets itself up.
PY        ?= python3
VENV      := .venv
VPY       := $(VENV)/bin/python
export CUWIRE_HEADER_CACHE ?= $(CURDIR)/.cache/headers

.PHONY: venv codegen check-generated client server wheel apps demo test lint gpu-test gpu-programs gpu-stress gpu-device-list gpu-kernel-attributes bench bench-distance bench-jax-end bench-link-rate bench-cpu-distance bench-overflow bench-peer-copy docker clean

$(VENV)/.installed: pyproject.toml setup.py emulator/pyproject.toml
	$(PY) -m venv $(VENV)
	$(VPY) -m pip install -q --upgrade pip
	$(VPY) -m pip install -q -e '.[dev]' -e ./emulator  # the emulated device: tests only, a package apart
	touch $@

venv: $(VENV)/.installed

## Regenerate cuwire/generated/ from the pinned CUDA headers and cuwire/codegen/annotations/
codegen: venv
	$(VPY) -m cuwire.codegen

## Fail when cuwire/generated/ (and cuwire/wire/protocol_pb2.py) is not what `make codegen` makes
check-generated: venv
	rm -rf build/generated-check && $(VPY) -m cuwire.codegen --out build/generated-check > /dev/null
	diff -rq --exclude=__pycache__ --exclude=__init__.py --exclude=protocol_pb2.py cuwire/generated build/generated-check \
	  && diff -q cuwire/wire/protocol_pb2.py build/generated-check/protocol_pb2.py \
	  || (echo "generated/ is stale: run make codegen and commit" >&2; exit 1)

## Build the client library (libcuwire.so and the names programs load) into build/client, when its sources changed
CLIENT_SRC := $(wildcard cuwire/client/*.c cuwire/client/*.h cuwire/generated/client_*.c cuwire/generated/client_cdefs.h) \
              cuwire/client/build.py cuwire/generated/exports.map cuwire/generated/api_manifest.json \
              cuwire/wire/shm_ring.h cuwire/wire/stream.h cuwire/wire/socket_wait.h cuwire/wire/frames.h cuwire/wire/ring.py
build/client/libcuwire.so: $(VENV)/.installed $(CLIENT_SRC)
	$(VPY) -m cuwire.client.build

client: build/client/libcuwire.so

## The wheel to publish, in dist/: the client library built into it, tagged manylinux by auditwheel (which
## refuses a library that links libpython or anything outside manylinux's libraries)
wheel: venv
	rm -rf build/wheel && $(VPY) -m pip wheel -q --no-deps --no-build-isolation -w build/wheel .
	PATH=$(CURDIR)/$(VENV)/bin:$$PATH $(VPY) -m auditwheel repair --plat manylinux_2_34_x86_64 -w dist build/wheel/cuwire-*.whl

## Build the server's record loop (cuwire/server/records.c) in place; pip install builds it too (setup.py)
SERVER_C := cuwire/server/records.c cuwire/wire/socket_wait.h cuwire/wire/shm_ring.h cuwire/wire/stream.h cuwire/wire/frames.h cuwire/server/records_build.py $(wildcard cuwire/generated/server_records.*)
build/.server: $(VENV)/.installed $(SERVER_C)
	$(VPY) -m cuwire.server.records_build && mkdir -p build && touch $@

server: build/.server

## Build the CUDA test apps with nvcc -cudart shared into tests/test_apps/build
apps:
	$(MAKE) -j$$(nproc) -C tests/test_apps

## Run a bundled CUDA test app through cuwire: on this machine's GPU if it has one, else emulated
demo: venv client server
	$(MAKE) -s -C tests/test_apps build/vector_add
	@if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then \
	  $(VENV)/bin/cuwire run -- tests/test_apps/build/vector_add; \
	else \
	  echo "no GPU on this machine: running on the emulated device"; \
	  $(VENV)/bin/cuwire run --emulated -- tests/test_apps/build/vector_add; \
	fi

lint: venv
	$(VPY) -m ruff check .
	$(VENV)/bin/hadolint docker/Dockerfile

## Everything CI checks: lint, generated/ up to date, client and apps built, the test suite (on
## PYTEST_WORKERS processes at once, pytest-xdist: 2 by default, CI's cores; 0 runs them in this one)
PYTEST_WORKERS ?= 2
test: venv lint check-generated client server apps
	$(VPY) -m pytest -q -m 'not gpu' -n $(PYTEST_WORKERS)

## On a machine with an NVIDIA GPU: every test app natively and through cuwire, one line per app
gpu-test:
	bash tests/gpu_test.sh

## On a GPU machine: a few programs only (PROGRAMS="graph_updates tests/jax_apps/jax_programs.py"), as gpu-test runs them
gpu-programs:
	bash tests/gpu_programs.sh $(PROGRAMS)

gpu-stress:
	bash tests/gpu_stress.sh

## On a machine with two GPUs: one program, a server each, as one device list (CUWIRE_SERVER=a,b)
gpu-device-list:
	bash tests/gpu_device_list.sh

## On a GPU machine, natively: cuwire/kernel_facts.py's model of each kernel's attributes against the driver's
gpu-kernel-attributes:
	bash -c 'PY=$${PYTHON:-python3} LOG=build/gpu-kernel-attributes; mkdir -p $$LOG; source tests/gpu_env.sh; \
	  make -s -C tests/test_apps >$$LOG/apps.log 2>&1; $$PY tests/gpu_kernel_attributes.py'

bench:
	bash bench/run.sh

## On a GPU machine: PyTorch steps with the server behind a link delayed 0.1 and 1 ms each way
bench-distance:
	bash bench/distance.sh

## On a GPU machine: what a JAX program's end (XLA's teardown) waits for, 1 ms each way, traced
bench-jax-end:
	bash bench/jax_end.sh

## On a GPU machine: large copies through cuwire over a link of 1 and 10 Gbit/s (bench/delay_link's rate), beside plain TCP
bench-link-rate:
	bash bench/link_rate.sh

## Here, no GPU: round trips a step of tests/test_apps/step_loop behind a link delayed 0, 0.1 and 1 ms each way
bench-cpu-distance: venv apps
	bash bench/cpu_distance.sh

## On a machine with two GPUs: copies between them natively, through one server, and through two servers of a device list
bench-peer-copy:
	bash bench/peer_copy.sh

## On a GPU machine: PyTorch training past a session's device memory budget, with and without host overflow
bench-overflow:
	bash bench/overflow.sh

docker:
	docker build -f docker/Dockerfile -t cuwire-server .
	docker build -f docker/client.Dockerfile -t cuwire-client .

clean:
	rm -rf build dist tests/test_apps/build
