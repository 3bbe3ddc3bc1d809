# Quick start: `make study` (the default study) and `make test` (all tests). Both set up
# the pinned virtual environment first when it is missing or out of date.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# The installer of the locks (INSTALL_LOCK) and pip's own settings passed on to it, as uv
# reads no pip configuration: find-links (a wheel folder) and the indexes, from pip's
# environment variables or its configuration files.
UV_VERSION := 0.13.8
PIP_SETTING = $(strip $(or $(PIP_$(1)),$(shell $(PYTHON) -m pip config get global.$(2) 2>/dev/null)))
UV_PIP_ARGS = $(foreach v,$(call PIP_SETTING,FIND_LINKS,find-links),--find-links $(v)) \
	$(foreach v,$(call PIP_SETTING,EXTRA_INDEX_URL,extra-index-url),--extra-index-url $(v)) \
	$(foreach v,$(call PIP_SETTING,INDEX_URL,index-url),--index-url $(v)) \
	--index-strategy unsafe-best-match
# The RO-Crate validator's own environment (its pins clash with requirements.lock).
CRATE_VENV := .venv-crate
CRATE_STAMP := $(CRATE_VENV)/.installed
# Crates `make validate-crates` checks (default: every crate under results/).
CRATES ?=
CORES ?= 2
STUDY ?= config/config.yaml
# The study's name (results/<name>/, reports/<name>/), read from its config file.
STUDY_NAME = $(shell sed -n 's/^study:[[:space:]]*\([^[:space:]#]*\).*/\1/p' $(STUDY))
# Folders `make audit` checks (default: every manifest under results/ and reports/paper/).
AUDIT ?=
# Where `snakemake --profile slurm` looks for the profile (Snakemake's user config dir).
PROFILE_DIR ?= $(or $(XDG_CONFIG_HOME),$(HOME)/.config)/snakemake/slurm
# Jobs find jupyter, nbconvert and python of the venv through PATH.
export PATH := $(abspath $(BIN)):$(PATH)

# The GPU reference run (docs/GPU_REFERENCE_RUN.md).
GPU_STUDY ?= config/studies/reference-gpu.yaml
# Where reference-gpu writes its archive ($OUT on the device machine).
OUT ?= reference-out
BUNDLE := .gpu-bundle
ARCHIVE ?=
REFERENCE_NAME ?=

.PHONY: setup study smoke test test-fast test-slurm lint report audit paper install-profile clean \
	gpu-bundle reference-gpu reference-import crate-validator validate-crates

# A lock installed into a new venv: uv installs its wheels side by side (23-25 s against
# pip's 65-72 s for requirements.lock on the 2-core VM, 2026-12-05; the same
# distributions and versions), byte-compiled as pip does; should uv fail, pip installs it.
# $(1): the venv's folder, $(2): the lock.
define INSTALL_LOCK
$(PYTHON) -m venv $(1)
$(1)/bin/python -m pip install --quiet uv==$(UV_VERSION)
$(1)/bin/uv pip install --quiet --python $(1)/bin/python --compile-bytecode $(UV_PIP_ARGS) \
	--requirement $(2) || $(1)/bin/python -m pip install --quiet --requirement $(2)
endef

$(STAMP): requirements.lock pyproject.toml
	$(call INSTALL_LOCK,$(VENV),requirements.lock)
	# The package itself, editable and without dependencies (the lock has them all): the
	# `crossover-study` command. setuptools comes from the lock, so no build isolation.
	$(BIN)/python -m pip install --quiet --no-deps --no-build-isolation --editable .
	touch $(STAMP)

setup: $(STAMP)  ## create .venv with the exact versions of requirements.lock, and the crossover-study command

$(CRATE_STAMP): requirements-crate.lock
	$(call INSTALL_LOCK,$(CRATE_VENV),requirements-crate.lock)
	touch $(CRATE_STAMP)

crate-validator: $(CRATE_STAMP)  ## create .venv-crate: roc-validator, pinned in requirements-crate.lock

validate-crates: setup crate-validator  ## roc-validator, offline, on every RO-Crate under results/ (or CRATES=...)
	PYTHONPATH=src $(CRATE_VENV)/bin/python -m crossover_study validate-crate \
		--context "$$($(BIN)/python -c 'import importlib.resources as r; print(r.files("rocrate") / "data" / "ro-crate.jsonld")')" \
		$(or $(CRATES),$(patsubst %/ro-crate-metadata.json,%,$(wildcard results/*/ro-crate-metadata.json results/reference/*/ro-crate-metadata.json)))

# Each run first checks its study file: Snakemake's own YAML error names no file or line.
study: setup  ## run the default study: results/default/, reports/default/report.html
	PYTHONPATH=src $(BIN)/python -m crossover_study validate $(STUDY)
	$(BIN)/snakemake --cores $(CORES) --keep-going --rerun-incomplete --configfile $(STUDY)

smoke: setup  ## the one-minute smoke study (CPU, two cases, two sizes)
	PYTHONPATH=src $(BIN)/python -m crossover_study validate config/studies/smoke.yaml
	$(BIN)/snakemake --cores $(CORES) --keep-going --rerun-incomplete --configfile config/studies/smoke.yaml

report: setup  ## Snakemake's own report of the study: reports/<study>/snakemake-report.zip
	PYTHONPATH=src $(BIN)/python -m crossover_study validate $(STUDY)
	$(BIN)/snakemake --cores $(CORES) --configfile $(STUDY) --report reports/$(STUDY_NAME)/snakemake-report.zip

audit: setup  ## recompute the manifests' hashes; check tables and figures derive from the results
	PYTHONPATH=src $(BIN)/python -m crossover_study audit $(AUDIT)

paper: setup  ## reports/paper/fig-*.pdf and .png from the committed results/reference/ only
	$(BIN)/snakemake --cores $(CORES) paper

test: setup crate-validator  ## all tests (unit tests, the smoke study through Snakemake, the Slurm tests)
	$(BIN)/python -m pytest

test-fast: setup crate-validator  ## unit tests only
	$(BIN)/python -m pytest -m "not slow and not slurm"

test-slurm: setup  ## the tests on a real single-node Slurm (tests/slurm/start-slurm.sh)
	$(BIN)/python -m pytest -m slurm

gpu-bundle: setup  ## on a machine with PyPI: the wheels the GPU machine lacks, into .gpu-bundle/ (ignored, carried)
	PYTHONPATH=src $(BIN)/python -m crossover_study gpu-bundle build --dest $(BUNDLE)

ifeq ($(REHEARSE),1)
reference-gpu: setup  ## REHEARSE=1: the same run on this CPU, in a throwaway env of what the GPU machine has
	PYTHONPATH=src $(BIN)/python -m crossover_study rehearse
else
# No setup: on the GPU machine this runs with its own python3 and the carried bundle.
reference-gpu:  ## on the GPU machine: measure GPU_STUDY into one archive in $(OUT) (under 8 minutes)
	PYTHONPATH=src $(PYTHON) -m crossover_study reference-gpu --study $(GPU_STUDY) --bundle $(BUNDLE) --out $(OUT)
endif

# ARCHIVE and REFERENCE_NAME reach the command through the environment, never pasted
# into the shell line, so that no quote in them can add arguments.
reference-import: export ARCHIVE_ARG = $(ARCHIVE)
reference-import: export REFERENCE_NAME_ARG = $(REFERENCE_NAME)
reference-import: setup  ## ARCHIVE=... [REFERENCE_NAME=...]: add a reference run's archive as results/reference/<gpu>-<date>/
	@test -n "$$ARCHIVE_ARG" || { echo "usage: make reference-import ARCHIVE=path/to/reference-*.tar.gz [REFERENCE_NAME=<folder name>]"; exit 2; }
	PYTHONPATH=src $(BIN)/python -m crossover_study reference-import \
		"$$ARCHIVE_ARG" $(if $(REFERENCE_NAME),--name="$$REFERENCE_NAME_ARG")

install-profile:  ## install profiles/slurm as the `slurm` profile: snakemake --profile slurm
	mkdir -p "$(PROFILE_DIR)"
	cp profiles/slurm/config.yaml "$(PROFILE_DIR)/config.yaml"
	@echo "installed $(PROFILE_DIR)/config.yaml"

lint: setup  ## ruff and snakemake --lint
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/snakefmt --check Snakefile workflow/rules
	$(BIN)/snakemake --lint

clean:  ## remove generated results and reports (keeps .venv and the committed results/reference/)
	find results -mindepth 1 -maxdepth 1 ! -name reference ! -name .gitkeep -exec rm -rf {} +
	rm -rf reports/* logs .snakemake
	touch results/.gitkeep reports/.gitkeep
