#!/usr/bin/env bash
# Make sure the system (non-Python) pieces the project needs are present:
#   - headless OpenGL through Mesa EGL (surfaceless platform, llvmpipe driver):
#     libEGL.so.1 (libegl1), libEGL_mesa.so.0 (libegl-mesa0), the Mesa DRI/gallium
#     driver swrast_dri.so or libgallium*.so (libgl1-mesa-dri);
#   - a working `python3 -m venv` (python3-venv on Debian/Ubuntu);
#   - for the C ABI / Fortran module (CMakeLists.txt, tests/test_capi.py): cmake, C/C++
#     compilers, gfortran, and the headers + shared libpython of the interpreter that
#     embeds (libpython3.X-dev for a Debian python3; pyenv/python.org builds ship them);
#   - for the viewer's browser test (tests/test_viewer.py drives `insitu view`'s page in a
#     headless browser): chromium;
#   - Debian's Open MPI (libopenmpi-dev, openmpi-bin: mpicc.openmpi, mpiexec.openmpi), for
#     `make test-openmpi`: the core install with an mpi4py built against a system MPI.
#     The main .venv keeps the mpich wheel's MPI (its bin/ and lib/ come first).
# Installs missing Debian packages when running as root with apt-get; otherwise prints
# what to install and exits 0 (the rendering tests then report what is missing).
# Idempotent; prints nothing when everything is present.
set -euo pipefail

PYTHON="${PYTHON:-python3}"

have_lib() {  # have_lib NAME: is a shared library NAME known to the dynamic loader?
    if command -v ldconfig >/dev/null 2>&1 || [ -x /sbin/ldconfig ]; then
        local ldc
        ldc="$(command -v ldconfig || echo /sbin/ldconfig)"
        "$ldc" -p 2>/dev/null | grep -q "[[:space:]]$1 " && return 0
    fi
    local d
    for d in /usr/lib/*-linux-gnu /lib/*-linux-gnu /usr/lib64 /usr/lib; do
        [ -e "$d/$1" ] && return 0
    done
    return 1
}

have_mesa_driver() {  # llvmpipe: swrast_dri.so (Mesa < 24) or libgallium-*.so (Mesa >= 24)
    local d
    for d in /usr/lib/*-linux-gnu/dri /usr/lib64/dri /usr/lib/dri /usr/lib/*-linux-gnu /usr/lib64; do
        compgen -G "$d/swrast_dri.so" >/dev/null && return 0
        compgen -G "$d/libgallium*.so" >/dev/null && return 0
    done
    return 1
}

missing=()
have_lib libEGL.so.1      || missing+=(libegl1)
have_lib libEGL_mesa.so.0 || missing+=(libegl-mesa0)
have_mesa_driver          || missing+=(libgl1-mesa-dri)
if ! "$PYTHON" -c 'import venv, ensurepip' >/dev/null 2>&1; then
    missing+=(python3-venv)
fi
command -v cmake    >/dev/null 2>&1 || missing+=(cmake)
command -v cc       >/dev/null 2>&1 || missing+=(gcc)
command -v c++      >/dev/null 2>&1 || missing+=(g++)
command -v gfortran >/dev/null 2>&1 || missing+=(gfortran)
command -v mpicc.openmpi   >/dev/null 2>&1 || missing+=(libopenmpi-dev)
command -v mpiexec.openmpi >/dev/null 2>&1 || missing+=(openmpi-bin)
command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || missing+=(chromium)
# Python.h of this interpreter (embedding); a Debian interpreter gets libpython3.X-dev.
if ! "$PYTHON" -c 'import os, sys, sysconfig
sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))' >/dev/null 2>&1; then
    pyver="$("$PYTHON" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null || true)"
    [ -n "$pyver" ] && missing+=("libpython${pyver}-dev")
fi

[ ${#missing[@]} -eq 0 ] && exit 0

if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "ensure-system: installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    if ! apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null; then
        # one unavailable package must not keep the others out
        for pkg in "${missing[@]}"; do
            apt-get install -y -qq --no-install-recommends "$pkg" >/dev/null \
                || echo "ensure-system: could not install $pkg" >&2
        done
    fi
    exit 0
fi

cat >&2 <<MSG
ensure-system: missing system packages: ${missing[*]}
  Install them (Debian/Ubuntu):  sudo apt-get install ${missing[*]}
  Continuing: without the GL libraries the rendering tests report what is missing;
  without python3-venv 'make venv' cannot create .venv; without cmake, compilers or
  Python headers the C API tests fail saying what is missing (gfortran: they skip);
  without chromium the viewer's browser test skips; without Open MPI
  'make test-openmpi' says what is missing and fails.
MSG
exit 0
