#!/usr/bin/env bash
# Gradescope runs this once, as root, while it builds the autograder image (an Ubuntu base image
# whose python3 is 3.10 or newer). Written by `python -m grader gradescope`.
set -euo pipefail
SOURCE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
export DEBIAN_FRONTEND=noninteractive
apt-get update -q
apt-get install -y -q python3 python3-venv python3-pip
python3 -m venv "$SOURCE/venv"
"$SOURCE/venv/bin/python" -m pip install --quiet --upgrade pip
# Gradescope has no GPU: the CPU build of the PyTorch the course is tested with (Makefile's TORCH_SPEC).
"$SOURCE/venv/bin/python" -m pip install --quiet "@@TORCH_SPEC@@" --index-url https://download.pytorch.org/whl/cpu
# Editable, so that the grader finds course.toml, the public tests and the hidden suites in source/course.
"$SOURCE/venv/bin/python" -m pip install --quiet -e "$SOURCE/course"
