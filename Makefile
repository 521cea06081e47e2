# The course's commands. The first use creates .venv and installs everything into it.
#
# On a GPU machine, install your CUDA build of torch first and keep it:
#   make TORCH_SPEC= grade        (TORCH_SPEC empty: use the torch already in .venv)
# or point PYTHON at an interpreter whose environment already has CUDA torch.

PYTHON ?= python3
VENV ?= .venv
TORCH_SPEC ?= torch==2.13.0
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: grade watch test lab bench sync release site gpu-check lint clean

$(STAMP): pyproject.toml
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@echo "Installing the course environment into $(VENV) (first run only)..."
	@$(BIN)/python -m pip install --quiet --upgrade pip
	@if [ -n "$(TORCH_SPEC)" ]; then $(BIN)/python -m pip install --quiet "$(TORCH_SPEC)"; fi
	@# uv resolves and installs the rest in seconds where pip takes a minute; pip if uv fails.
	@# --compile-bytecode writes the .pyc files pip would: without them, where
	@# PYTHONDONTWRITEBYTECODE is set, every process compiles pytest, numpy, ... again. uv's
	@# compiling interpreter obeys that variable too, hence it is emptied (which unsets it).
	@$(BIN)/python -m pip install --quiet uv \
		&& PYTHONDONTWRITEBYTECODE= $(BIN)/uv pip install --quiet --compile-bytecode --python $(BIN)/python -e ".[dev]" \
		|| $(BIN)/python -m pip install --quiet -e ".[dev]"
	@touch $(STAMP)

grade: $(STAMP)  ## score assignments/ (your working copy)
	@$(BIN)/python -m grader grade $(ARGS)

watch: $(STAMP)  ## a module's public tests on every save: make watch ARGS=collectives
	@$(BIN)/python -m grader watch $(ARGS)

test: $(STAMP)  ## the project's own tests
	@$(BIN)/python -m pytest tests -q --durations=10 $(ARGS)

lab: $(STAMP)  ## JupyterLab on the course
	@$(BIN)/jupyter lab --notebook-dir=. $(ARGS)

bench: $(STAMP)  ## reference figures beside library anchors and physical bounds
	@$(BIN)/python -m grader bench $(ARGS)

sync: $(STAMP)  ## regenerate assignments/ stubs from solutions/
	@$(BIN)/python -m grader sync $(ARGS)

release: $(STAMP)  ## the student template repository for GitHub Classroom: make release ARGS="--out DIR"
	@$(BIN)/python -m grader release $(ARGS)

site: $(STAMP)  ## the course website in site/ (MkDocs + Material; executes the notebooks): make site ARGS="--no-execute"
	@$(BIN)/python -m grader site --out site $(ARGS)

gpu-check: $(STAMP)  ## GPU-only checks (needs a CUDA device); reports in gpu-check/
	@PYTHON=$(BIN)/python .ci/gpu-check $(ARGS)

lint: $(STAMP)
	@$(BIN)/ruff check .

clean:
	rm -rf $(VENV)
