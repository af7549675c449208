# Everything runs from a local virtual environment made by `make venv`.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
DEMO   := build/demo

.PHONY: venv demo test test-fast bench history update-releases readme clean

$(BIN)/eaglepatch: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $@

venv: $(BIN)/eaglepatch

# Copy the bundled fixture tree into a throwaway git repository, then check, diff and apply.
demo: venv
	rm -rf $(DEMO) && mkdir -p $(DEMO)
	cp -r fixtures/checkout/. $(DEMO)/
	cd $(DEMO) && git init -q -b main && git add -A && git -c user.name=demo -c user.email=demo@example.invalid commit -qm "fixture tree"
	-$(BIN)/eaglepatch check $(DEMO)
	-$(BIN)/eaglepatch diff $(DEMO)
	$(BIN)/eaglepatch apply $(DEMO)
	$(BIN)/eaglepatch check $(DEMO)
	# a class that is itself the causal LM: its hooks are learned from a class of the tree that has them
	-$(BIN)/eaglepatch diff --model olmo_like $(DEMO)
	$(BIN)/eaglepatch apply --model olmo_like $(DEMO)
	$(BIN)/eaglepatch check --model olmo_like $(DEMO)

# The whole suite, integration tests on real SGLang releases included (downloaded once into .cache/).
test: venv
	$(BIN)/python -m pytest -q

test-fast: venv
	$(BIN)/python -m pytest -q -m "not integration"

bench: venv
	$(BIN)/python bench/run.py

# Ground truth: what upstream fixed between consecutive pinned releases, against what
# `check --all` said about the older one. Rewrites bench/history.json (commit it on purpose).
history: venv
	$(BIN)/python bench/history.py

# Re-pin tests/releases.txt from `pip index versions sglang` (on purpose; commit the diff).
update-releases: venv
	$(BIN)/python tests/update_releases.py

# Regenerate README.md's sample outputs from fixtures/checkout (tests/test_readme_samples.py checks them).
readme: venv
	$(BIN)/python tools/readme_samples.py --write

clean:
	rm -rf $(VENV) build .cache .pytest_cache
