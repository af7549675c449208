# Everything runs from a local virtual environment made by `make venv`.
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
DEMO   := build/demo
# pytest-xdist workers: `auto` is one a core (2 on CI). `--dist loadgroup` keeps the tests of one
# release in tests/test_release_range.py on one worker (tests/conftest.py groups them).
JOBS   ?= auto
XDIST  := -n $(JOBS) --dist loadgroup

.PHONY: venv demo test test-fast test-integration test-offline-proof lint typecheck bench history update-releases readme golden clean

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
	# the seed's launch, predicted before it runs: the missing hooks and the context-length failure
	-$(BIN)/eaglepatch preflight $(DEMO) -- python -m sglang.launch_server --model-path fixtures/checkpoints/kimi-k2.5 \
	    --speculative-algorithm EAGLE3 --speculative-draft-model-path fixtures/checkpoints/kimi-k2.5-eagle3 --tp 8
	-$(BIN)/eaglepatch check $(DEMO)
	-$(BIN)/eaglepatch diff $(DEMO)
	$(BIN)/eaglepatch apply $(DEMO)
	$(BIN)/eaglepatch check $(DEMO)
	# a vLLM launch read the same way: a draft with 2048 positions under --max-model-len 8192, and no layer ids
	-$(BIN)/eaglepatch preflight fixtures/vllm -- vllm serve fixtures/checkpoints/llama-3.1-8b --max-model-len 8192 \
	    --speculative-config '{"method": "eagle3", "model": "fixtures/checkpoints/llama-3.1-8b-eagle3", "num_speculative_tokens": 3}'
	# a class that is itself the causal LM: its hooks are learned from a class of the tree that has them
	-$(BIN)/eaglepatch diff --model olmo_like $(DEMO)
	$(BIN)/eaglepatch apply --model olmo_like $(DEMO)
	$(BIN)/eaglepatch check --model olmo_like $(DEMO)
	# a class with neither the hooks nor their plumbing: both are written, learned from the tree
	-$(BIN)/eaglepatch diff --model phi_like $(DEMO)
	$(BIN)/eaglepatch apply --model phi_like $(DEMO)
	$(BIN)/eaglepatch check --model phi_like $(DEMO)

# The whole suite: the fast tier with the network refused, then the integration tests on every
# pinned release (tests/releases.txt; wheels fetched once into .cache/sglang, shared by the workers).
test: lint typecheck test-fast test-integration

# ruff: the rules in pyproject.toml, over the package, the tests and the scripts.
lint: venv
	$(BIN)/ruff check patcher codemods tests bench tools

# mypy on the package as installed: build/typecheck/eaglepatch links patcher's modules and stage
# folders (patcher/*/), codemods/ inside.
typecheck: venv
	rm -rf build/typecheck && mkdir -p build/typecheck/eaglepatch
	for f in patcher/*.py; do ln -s ../../../$$f build/typecheck/eaglepatch/; done
	for f in patcher/*/__init__.py; do ln -s ../../../$${f%/__init__.py} build/typecheck/eaglepatch/; done
	ln -s ../../../codemods build/typecheck/eaglepatch/codemods
	cd build/typecheck && ../../$(BIN)/python -m mypy -p eaglepatch

# Offline by construction: EAGLEPATCH_OFFLINE=1 makes tests/conftest.py refuse every connection to
# another host (and PIP_NO_INDEX for pip subprocesses); a test that needs the network fails here.
test-fast: venv
	EAGLEPATCH_OFFLINE=1 $(BIN)/python -m pytest -q -m "not integration" $(XDIST)

test-integration: venv
	$(BIN)/python -m pytest -q -m integration $(XDIST) --durations=15

# The same fast tier in a network namespace of its own (Linux, util-linux `unshare`): no interface
# but a loopback that is down, for every subprocess too. Root keeps its identity (`-n`); anyone
# else maps to themselves in a user namespace (`-c`).
test-offline-proof: venv
	EAGLEPATCH_OFFLINE=1 $(if $(filter 0,$(shell id -u)),unshare -n,unshare -cn) \
		$(BIN)/python -m pytest -q -m "not integration" $(XDIST)

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

# Every output of the CLI (check in each format, diff, apply, revert, explain) on every pinned SGLang
# and vLLM release, into build/golden/<short sha>: compare two with `tools/golden.py compare A B`.
golden: venv
	$(BIN)/python tools/golden.py record build/golden/$$(git rev-parse --short HEAD)

clean:
	rm -rf $(VENV) build .cache .pytest_cache
