#!/usr/bin/env bash
# Installs openreg and everything its jobs and tests need on a fresh machine.
# torch is pinned exactly: 2.13.0 is the CPU wheel available here (a looser
# range would pull a multi-GB CUDA build).
set -euo pipefail
cd "$(dirname "$0")/.."
python -m pip install --quiet --disable-pip-version-check \
  "torch==2.13.0" ninja numpy "setuptools>=64" wheel \
  matplotlib pytest pytest-xdist pytest-timeout expecttest
# --no-build-isolation: compile against the torch installed above.
python -m pip install --quiet --disable-pip-version-check --no-build-isolation -e .
