# insitu: build and test entry points.
#   make demo      install everything (system libs, .venv) and run the 4-rank in-situ eikonal demo (out/eikonal/)
#   make test      install everything, run ruff and mypy, then the CPU test suite (what CI runs)
#   make gpu-test  GPU machine only: run tests/gpu with that machine's own Python env
#   make capi      build the C/C++/Fortran adaptor library (CMakeLists.txt) into build/capi
#   make clean     remove .venv, build outputs and caches

PYTHON ?= python3
VENV   := .venv
VPY    := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
# mpiexec comes from the mpich wheel inside the venv: put the venv first on PATH.
VENV_PATH := PATH="$(CURDIR)/$(VENV)/bin:$$PATH" VIRTUAL_ENV="$(CURDIR)/$(VENV)"

.PHONY: all venv system test demo gpu-test capi clean

all: test

system:
	@bash scripts/ensure-system.sh

venv: $(STAMP)

# Re-install only when pyproject.toml changes (editable install: code edits need no re-install).
$(STAMP): pyproject.toml
	@test -x $(VPY) || $(PYTHON) -m venv $(VENV)
	$(VPY) -m pip install -q --upgrade pip
	$(VPY) -m pip install -q -e '.[test]'
	@touch $@

test: system venv
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy
	$(VENV_PATH) $(VPY) -m pytest -q

demo: system venv
	@mkdir -p out
	$(VENV_PATH) $(VENV)/bin/mpiexec -n 4 $(VPY) examples/eikonal_insitu.py --out out/eikonal

# libinsitu_adaptor (+ the Fortran module when gfortran is there), embedding this venv's Python;
# C/C++/Fortran programs use it with -Dinsitu_DIR=$(CURDIR)/build/capi (examples/heat_cxx, heat_fortran).
capi: system venv
	$(VENV_PATH) cmake -S . -B build/capi -DPython3_EXECUTABLE=$(CURDIR)/$(VPY) -DCMAKE_BUILD_TYPE=Release
	$(VENV_PATH) cmake --build build/capi -j 2

# For the GPU machine, which has its own Python environment (CuPy, CUDA bindings, the
# package installed there) and no .venv: uses whatever `python3` is on PATH.
# tests/gpu is excluded from the default run by norecursedirs in pyproject.toml.
# The runtime finds kernels, GL contexts and colormaps through entry points (insitu/plugins.py):
# the machine's Python needs this project's metadata, installed offline from the tree.
gpu-test:
	PIP_BREAK_SYSTEM_PACKAGES=1 python3 -m pip install -q --no-deps --no-build-isolation --no-index -e .
	python3 -m pytest -q tests/gpu

clean:
	rm -rf $(VENV) build dist *.egg-info .pytest_cache .mypy_cache .ruff_cache .hypothesis out
	find . -name __pycache__ -type d -prune -exec rm -rf {} +
