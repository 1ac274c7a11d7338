# imagebuilder: set-up, demo and tests. Works on a fresh Debian machine as root, where no Docker
# engine runs and no image can be pulled (see README.md).
SHELL := /bin/bash
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
WHEELHOUSE := .wheelhouse
CUDA_WHEELHOUSE := .wheelhouse-cuda
REPORT ?= reports/demo
MATRIX ?= examples/demo.yaml
PYTEST_ARGS ?=

.PHONY: help venv engine registry compose registry-services base-image wheelhouse cuda-wheels seed browser sigstore env demo test test-setup unit integration lint docs reference golden clean

help:
	@echo "make demo   - set everything up and build the example matrix (examples/demo.yaml) into 127.0.0.1:5000"
	@echo "make test   - set everything up, then lint (ruff, mypy --strict) and run all tests"
	@echo "make unit   - unit tests only (no engine needed)"
	@echo "make docs   - build the docs site strictly (mkdocs) into .site/"
	@echo "make golden - rewrite tests/golden from the templates (review the diff)"

$(BIN)/imagebuilder: pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[dev]'
	touch $@

venv: $(BIN)/imagebuilder

engine:
	bash .ci/engine.sh

registry:
	bash .ci/registry.sh

# A compose command for the tests' TLS + token registry services (pytest-docker starts them from tests/registry/),
# and their image built in the background once the base image is there (their compose then finds it cached).
compose: engine
	bash .ci/compose.sh

registry-services: compose base-image
	@(setsid docker build -q --network host -t imagebuilder-itest/registry-services:1 tests/registry \
	  >/var/tmp/imagebuilder-registry-services.log 2>&1 &)

# The base images the matrix names: pulled where a registry answers, else seeded from Debian's mirror.
base-image: engine venv wheelhouse
	@for image in $$($(BIN)/python -m imagebuilder plan --matrix $(MATRIX) --json | $(BIN)/python -c \
	    'import json, sys; print(*sorted({n["base_image"] for n in json.load(sys.stdin) if n["base_image"]}))'); do \
	  bash .ci/base-image.sh "$$image" || exit 1; done

wheelhouse:
	bash .ci/wheelhouse.sh $(WHEELHOUSE) 2.13.0

# The CUDA tests' wheels (~7 GB from PyPI), downloaded in the background while everything else runs; the
# CUDA tests wait for it (and download them themselves when nothing started it).
cuda-wheels:
	@if [ -e $(CUDA_WHEELHOUSE)/.complete ]; then echo "cuda wheels: present"; \
	elif kill -0 "$$(cat $(CUDA_WHEELHOUSE)/.pid 2>/dev/null)" 2>/dev/null; then echo "cuda wheels: already downloading"; \
	else mkdir -p $(CUDA_WHEELHOUSE) && echo "cuda wheels: downloading in the background ($(CUDA_WHEELHOUSE)/download.log)" \
	  && (setsid bash .ci/cuda-wheels.sh $(CUDA_WHEELHOUSE) >$(CUDA_WHEELHOUSE)/download.log 2>&1 &); fi

env: venv engine registry compose wheelhouse base-image

# Debian's chromium, for the tests that open report.html (tests/browser and the real reports of tests/integration).
browser:
	bash .ci/browser.sh

# Sigstore's own verifier (npm @sigstore/verify, pinned in tests/sigstore/), for the tests that check our bundles.
sigstore:
	bash .ci/sigstore.sh

demo: env
	$(BIN)/imagebuilder build --matrix $(MATRIX) --report $(REPORT)

lint: venv
	$(BIN)/ruff check .
	$(BIN)/mypy

# The docs site, strictly: a broken link, anchor or nav entry fails it (a few seconds; into .site/, git-ignored).
docs: venv
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict  # not --quiet: it hides the warnings strict counts

# Rewrite docs/reference/ from the code (tests/unit/test_manual.py fails while a committed page differs).
reference: venv
	$(BIN)/python -m imagebuilder.manual docs/reference

# Everything but the integration and browser tests: no engine, no registry, no wheelhouse, no browser needed.
unit: venv
	$(BIN)/python -m pytest tests -m "not integration and not browser" -q $(PYTEST_ARGS)

integration: cuda-wheels env registry-services browser sigstore
	$(BIN)/python -m pytest tests -m "integration or browser" -v --durations=20 $(PYTEST_ARGS)

# Lint and build the docs strictly once, then every test once (what .ci/run runs), on two workers: the CUDA
# images build beside the other integration tests (tests/conftest.py: WORK_UNITS). The set-up runs side by side
# where nothing orders it (the venv's download beside the engine, the base image's seeding, the browser; lint
# once the venv is there): its parts wait on the network or on one core. apt takes one script at a time
# (.ci/apt.sh).
test:
	$(MAKE) -j4 --output-sync=line --no-print-directory test-setup
	$(BIN)/python -m pytest tests -v -n 2 --durations=30 $(PYTEST_ARGS)

test-setup: cuda-wheels seed env registry-services browser sigstore lint docs

# Debian's root file system for the base image, seeded in the background from the start (.ci/seed.sh): it waits on
# Debian's mirror, and `base-image`, which takes it, first waits for the venv that reads the matrix.
seed:
	@(setsid bash .ci/seed.sh bookworm >/var/tmp/imagebuilder-seed.log 2>&1 &)

golden: venv
	$(BIN)/python -m pytest tests/unit/test_render.py tests/unit/test_bake.py tests/unit/test_plan_view.py tests/unit/test_emit.py -q --update-golden

clean:
	rm -rf $(VENV) reports imagebuilder-report .pytest_cache .mypy_cache .ruff_cache
