#!/usr/bin/env bash
# Download the wheels the GPU machine lacks into .whl/ (ignored), for the device tool to carry.
#
# The H200 image (Python 3.12, torch 2.11 with CUDA) already has pytest, PyYAML, Jinja2, click,
# tqdm, matplotlib, numpy, attrs and typing-extensions; the grader also needs jsonschema, whose
# own needs are referencing, jsonschema-specifications and rpds-py (compiled: a cp312 wheel);
# a batch writes grades.xlsx (openpyxl, et-xmlfile) and compares code (copydetect).
# Versions are this project's own (.venv here), so the GPU machine grades with the same ones.
# scripts/gpu_check.sh installs them there (pip --no-index --no-deps) before its parts run.
#
#   scripts/gpu_wheels.sh            # here, once: ~0.5 MB into .whl/
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
WHEELS=(jsonschema==4.26.0 jsonschema-specifications==2025.9.1 referencing==0.37.0
        rpds-py==2026.9.1 copydetect==0.5.0 openpyxl==3.1.5 et-xmlfile==2.0.0)
if [[ -x .venv/bin/python ]]; then PY=.venv/bin/python; else PY=python3; fi
mkdir -p .whl
"$PY" -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    --platform manylinux1_x86_64 -d .whl "${WHEELS[@]}"
ls -l .whl
