#!/usr/bin/env bash
# Installs openreg and everything its jobs and tests need on a fresh machine.
# torch is pinned exactly: 2.13.0 is the CPU wheel available here (a looser
# range would pull a multi-GB CUDA build).
set -euo pipefail
cd "$(dirname "$0")/.."
# oreg_ccl's cross-host transport links the system libzmq (Debian's
# libzmq3-dev: headers + the library the extension loads at run time; pyzmq's
# wheel bundles a libzmq but no headers). iproute2 runs the two-namespace test;
# gdb gives a hung test subprocess's native stacks in its failure report.
if ! { [ -f /usr/include/zmq.h ] && command -v ip >/dev/null && command -v gdb >/dev/null; }; then
  SUDO=$([ "$(id -u)" -eq 0 ] || echo sudo)
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq libzmq3-dev iproute2 gdb >/dev/null
fi
python -m pip install --quiet --disable-pip-version-check \
  "torch==2.13.0" ninja numpy "setuptools>=64" wheel \
  matplotlib pytest pytest-xdist pytest-timeout expecttest pyzmq
# --no-build-isolation: compile against the torch installed above.
# Autoload off while building: a stale openreg entry point must not break the
# build's own "import torch".
TORCH_DEVICE_BACKEND_AUTOLOAD=0 \
  python -m pip install --quiet --disable-pip-version-check --no-build-isolation -e .
