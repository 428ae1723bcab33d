# drillbook: two commands do everything.
#   make book   set up .venv (first time) and build the website, every notebook executed
#   make test   set up .venv (first time) and run every check CI runs
# Data: tests and notebooks read the corpora from $DRILLBOOK_DATA (default: ../shared/data
# when that folder exists, else the user cache dir, downloading with checksums).

PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.drillbook-installed
# dev/CI installs pin the CPU wheel on disk; the package itself keeps torch unpinned
TORCH_PIN ?= torch==2.13.0

SHARED_DATA := $(abspath ../shared/data)
ifneq ($(wildcard $(SHARED_DATA)),)
export DRILLBOOK_DATA ?= $(SHARED_DATA)
endif
# the kernel the notebooks run on is this venv's, whatever ~/.local says
export JUPYTER_PATH := $(abspath $(VENV))/share/jupyter
export TQDM_DISABLE := 1
export PYDEVD_DISABLE_FILE_VALIDATION := 1
# experiment size: small (CPU), t4 (a GPU under 20 GiB or without bfloat16), full, auto
export DRILLBOOK_PROFILE ?= auto

.PHONY: help venv book book-check test lint unit notebooks package sync lock clean evidence \
        durations \
        rehearse-evidence

help:
	@echo "make book    build the website into _build/html (executes every notebook)"
	@echo "make test    lint, the book build (-W, from committed outputs), unit tests and"
	@echo "             nbval, which executes every notebook and checks the tagged cells"
	@echo "make package build sdist + wheel, twine check, install the wheel in a fresh venv, smoke test"
	@echo "make sync    regenerate notebooks/*.ipynb from the .py:percent sources"
	@echo "             (NB=notebooks/02_tied_joint_drill.py for just one)"
	@echo "make clean   remove _build (keeps .venv)"
	@echo "make durations  the whole suite, writing each file's seconds to tests/durations.json"
	@echo "make evidence MINUTES=9 OUT=evidence AUTHORS=../awd-lstm-lm MOS=../mos"
	@echo "             a GPU window: concurrency, the steps against the authors', the plans"
	@echo "             to their plateau, the paper-size rows, the chapters, all within"
	@echo "             MINUTES; needs only a python with torch (PYTHON=...)"
	@echo "make rehearse-evidence   the same on this CPU at tiny sizes (about 2 min)"

# --no-compile: no bytecode for the whole of torch and the book's tools up front (three
# quarters of torch's install); Python compiles what is imported, once, when it is.
$(STAMP): pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet --no-compile "$(TORCH_PIN)"
	$(BIN)/python -m pip install --quiet --no-compile -c constraints.txt -e ".[dev]"
	$(BIN)/python -m ipykernel install --sys-prefix --name python3 --display-name "Python 3 (drillbook)" > /dev/null
	touch $@

venv: $(STAMP)

book: $(STAMP)
	$(BIN)/jupyter-book build . -W -n --keep-going
	@echo "website: $(abspath _build/html/index.html)"

# The same warnings-as-errors build from the notebooks' committed outputs, without
# executing them again: `make test` runs every notebook once, under nbval, instead.
# It sits beside _config.yml: paths in a config (local Sphinx extensions) are relative to it.
NOEXEC_CONFIG := _config.noexec.yml
book-check: $(STAMP)
	sed "s/^  execute_notebooks: force.*/  execute_notebooks: 'off'/" _config.yml > $(NOEXEC_CONFIG)
	grep -q "execute_notebooks: 'off'" $(NOEXEC_CONFIG)
	$(BIN)/jupyter-book build . -W -n --keep-going --config $(NOEXEC_CONFIG)

# ruff, the package's layers and circles (the contracts in pyproject.toml), the notebooks
lint: $(STAMP)
	$(BIN)/ruff check drillbook tests tools notebooks
	$(BIN)/lint-imports --no-cache
	$(BIN)/python tools/notebooks.py check

# The tests run in TEST_JOBS processes (pytest-xdist; logical: one per CPU), a file (a
# notebook) to one process, each process with CHECK_THREADS of torch's CPU threads. The
# notebooks' outputs are recorded (make sync) with tools/notebooks.py's RECORD_THREADS
# threads, and checked here with CHECK_THREADS, another count: every test run executes
# the checked cells under a second summation order (tests/test_notebook_pairs.py keeps
# the two apart).
TEST_JOBS     ?= logical
CHECK_THREADS := 1
# --no-loadscope-reorder: the files go out in the order tests/conftest.py gives them, the
# longest (tests/durations.json) first, so that both workers finish together.
PYTEST := OMP_NUM_THREADS=$(CHECK_THREADS) MKL_NUM_THREADS=$(CHECK_THREADS) \
          $(BIN)/python -m pytest -n $(TEST_JOBS) --dist loadfile --no-loadscope-reorder
NBVAL  := --nbval-lax --nbval-current-env --nbval-sanitize-with tests/nbval_sanitize.cfg

unit: $(STAMP)
	$(PYTEST) tests

# DRILLBOOK_CHECK_FIGURES=1: every figure a chapter draws is checked for a reader
# (drillbook.plotting.figure_problems); a problem fails the cell that drew it
notebooks: $(STAMP)
	DRILLBOOK_CHECK_FIGURES=1 $(PYTEST) notebooks $(NBVAL)

# What a user installs: the sdist and wheel built from a clean tree, checked by twine, the
# wheel installed into a fresh venv holding only torch, and a smoke test run against it.
# That venv's torch (and what torch requires) is the dev venv's, linked from outside it
# (tools/venv_torch.py), not unpacked a second time: pip installs the wheel's own
# requirements there and leaves the linked ones as they are.
DIST        := _build/dist
WHEEL_VENV  := _build/wheel-venv
WHEEL_TORCH := _build/wheel-venv-torch
package: $(STAMP)
	rm -rf $(DIST) $(WHEEL_VENV) $(WHEEL_TORCH)
	mkdir -p _build
	$(BIN)/python -m build --sdist --wheel --outdir $(DIST) . > _build/package-build.log
	$(BIN)/python -m twine check --strict $(DIST)/*
	$(PYTHON) -m venv $(WHEEL_VENV)
	$(BIN)/python tools/venv_torch.py $(WHEEL_VENV) $(WHEEL_TORCH)
	$(WHEEL_VENV)/bin/python -m pip install --quiet --no-compile $(DIST)/*.whl
	cd $(WHEEL_VENV) && bin/python $(abspath tools/smoke_test.py)

# --durations: the run's log names its slowest tests and chapters (where CI's time goes)
test: $(STAMP)
	$(MAKE) lint
	$(MAKE) package
	$(MAKE) book-check
	DRILLBOOK_CHECK_FIGURES=1 $(PYTEST) tests notebooks $(NBVAL) --durations=40

# tests/durations.json: the seconds of each test file and chapter in a run of the whole
# suite, which orders the files of the next runs
durations: $(STAMP)
	DRILLBOOK_RECORD_DURATIONS=1 DRILLBOOK_CHECK_FIGURES=1 $(PYTEST) tests notebooks $(NBVAL)

# constraints.txt's pins, from this venv: after changing the extras (its comments kept)
lock: $(STAMP)
	{ grep '^#' constraints.txt; $(BIN)/python -m pip freeze --exclude-editable \
	    | grep -iv '^torch=='; } > constraints.new
	mv constraints.new constraints.txt

sync: $(STAMP)
	DRILLBOOK_CHECK_FIGURES=1 $(BIN)/python tools/notebooks.py sync $(NB)

clean:
	rm -rf _build $(NOEXEC_CONFIG)

# A GPU window, whatever is installed there: no venv, the checkout's drillbook on the path.
# Its parts in order (tools/evidence.py): concurrency, the steps against the authors', the
# plans trained to their plateau, the paper-size rows, the chapters. AUTHORS and MOS:
# checkouts of salesforce/awd-lstm-lm and zihangdai/mos (the steps part needs them).
MINUTES ?= 9
OUT     ?= evidence
AUTHORS ?=
MOS     ?=
evidence:
	PYTHONPATH=$(CURDIR) $(PYTHON) tools/evidence.py --minutes $(MINUTES) --out $(OUT) \
	    $(if $(AUTHORS),--authors $(AUTHORS)) $(if $(MOS),--mos $(MOS))

# The same command on this CPU at tiny sizes, in about two minutes: it checks the window's
# command runs end to end (what it measures here means nothing).
rehearse-evidence:
	PYTHONPATH=$(CURDIR) $(PYTHON) tools/evidence.py --rehearse --out $(OUT)-rehearsal \
	    $(if $(AUTHORS),--authors $(AUTHORS)) $(if $(MOS),--mos $(MOS))
