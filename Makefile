# scalescope: two commands on a fresh machine.
#   make demo   set up .venv (torch, Horovod, everything) and run the demo sweep + report
#   make test   the same set-up plus the dev tools, then the whole test suite
# Both are idempotent: stamps in .venv/.stamps skip finished steps.

PYTHON ?= python3
VENV   ?= .venv
TORCH  ?= torch==2.13.0
EXP    ?= runs/demo
PY     := $(VENV)/bin/python
STAMPS := $(VENV)/.stamps
PYTEST_ARGS ?=
PORT   ?=
NO_BROWSER ?=

.PHONY: demo test setup setup-dev horovod system lint notebooks clean help

help:
	@echo "make demo    - set up .venv and run the demo sweep and report into $(EXP)"
	@echo "make test    - set up .venv with dev tools and run the whole test suite"
	@echo "make lint    - ruff"
	@echo "make notebooks [EXP='dir ...'] [PORT=n] [NO_BROWSER=1] - JupyterLab, every notebook on those experiments"

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip setuptools wheel
	mkdir -p $(STAMPS)

$(STAMPS)/system: scripts/system_deps.sh | $(PY)
	bash scripts/system_deps.sh
	touch $@

# Keep an existing torch (a cluster's CUDA build, e.g. with VENV_FLAGS=--system-site-packages);
# otherwise install the pinned one ($(TORCH); on this kind of machine a local CPU wheel).
$(STAMPS)/torch: | $(PY)
	@if $(PY) -c "import torch" 2>/dev/null; then \
	  echo "[setup] keeping the installed torch $$($(PY) -c 'import torch; print(torch.__version__)')"; \
	else \
	  echo "[setup] installing $(TORCH)"; $(PY) -m pip install -q "$(TORCH)"; \
	fi
	touch $@

$(STAMPS)/base: pyproject.toml $(STAMPS)/torch
	$(PY) -m pip install -q -e ".[train,notebooks]"
	touch $@

$(STAMPS)/horovod: scripts/install_horovod.sh $(STAMPS)/base $(STAMPS)/system
	bash scripts/install_horovod.sh $(PY)
	touch $@

$(STAMPS)/dev: pyproject.toml $(STAMPS)/base
	$(PY) -m pip install -q -e ".[train,notebooks,dev,scale]"
	touch $@

# Nsight Systems CLI into .tools/ (from Debian's non-free archive, without changing apt sources)
$(STAMPS)/nsys: scripts/install_nsys.sh | $(PY)
	bash scripts/install_nsys.sh
	touch $@

setup: $(STAMPS)/base $(STAMPS)/system $(STAMPS)/horovod
setup-dev: setup $(STAMPS)/dev $(STAMPS)/nsys

demo: setup
	$(VENV)/bin/scalescope demo --out $(EXP)

test: setup-dev
	bash scripts/run_tests.sh $(PYTEST_ARGS)

lint: $(STAMPS)/dev
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check analysis instrumentation tests examples benchmarks scripts || true

# Every notebook shows $(EXP) (one or more experiment directories); PORT and NO_BROWSER are optional.
notebooks: setup
	$(VENV)/bin/scalescope notebooks $(EXP) $(if $(PORT),--port $(PORT)) $(if $(NO_BROWSER),--no-browser)

clean:
	rm -rf $(VENV) runs .pytest_cache .ruff_cache
