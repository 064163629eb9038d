# Two entry points for a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV   ?= .venv
# CPU wheel on disk here; GPU graders override, e.g. make TORCH="torch==2.13.0 --index-url ..."
TORCH  ?= torch==2.13.0
BIN    := $(VENV)/bin

.PHONY: venv demo test test-deployment lint bench browser container clean

$(BIN)/autograder: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q $(TORCH) numpy
	$(BIN)/pip install -q -e '.[dev,notebook,ray,otter]'
	touch $@

venv: $(BIN)/autograder

demo: venv
	$(BIN)/python scripts/demo.py

# ruff, then the engine's import layers (pyproject.toml [tool.importlinter]).
lint: venv
	$(BIN)/ruff check .
	$(BIN)/lint-imports

# The class overview test renders index.html in Debian's headless Chromium (via chromedriver).
browser:
	@command -v chromium >/dev/null && command -v chromedriver >/dev/null || \
	    { apt-get update -qq && apt-get install -y -qq chromium chromium-driver >/dev/null; }

# tests/container builds each Gradescope bundle into an image and grades in it, as Gradescope
# does: Docker from Debian's packages (the tests start a daemon when none runs) and debootstrap
# for the stand-in of Gradescope's base image.
container:
	@command -v dockerd >/dev/null && command -v debootstrap >/dev/null || \
	    { apt-get update -qq && apt-get install -y -qq docker.io debootstrap >/dev/null; }

# The suite in TEST_JOBS processes (pytest-xdist), each test file whole in one of them, so that
# a module's fixtures (a local Ray instance, the red-team gradings) start once (tests/conftest.py
# makes the units). Many tests wait on graders, sandboxes and timeouts: three processes on two
# cores take about 13.5 minutes (docs/measuring.md, "The project's own tests", says on what
# machine). At the end, the 25 slowest tests and each file's CPU seconds: where the time goes.
# PYTEST_ARGS: more options (e.g. PYTEST_ARGS="--junitxml=times.xml", or -k EXPR).
TEST_JOBS ?= 3
test: venv lint browser
	$(BIN)/python -m pytest -q -n $(TEST_JOBS) --dist loadscope --no-loadscope-reorder \
	    -m "not deployment" --durations=25 $(PYTEST_ARGS)

# The deployment targets run end to end, on their own (CI runs this after `make test`): each
# assignment's Gradescope image built and graded in Docker under Gradescope's CPU quota, which
# sharing the machine would only slow, and the GPU machine's script on CPU (its dry run).
test-deployment: venv browser container
	$(BIN)/python -m pytest -q -m deployment --durations=15 $(PYTEST_ARGS)

bench: venv
	$(BIN)/python bench/grade_vs_pytest.py

clean:
	rm -rf $(VENV) demo-out
