# The two commands (README): `make pipeline` runs the whole job on the embedded CPU default,
# `make test` runs the tests. Both set everything up first (scripts/bootstrap.sh, idempotent).
SHELL := /bin/bash
VENV := .venv
export DVC_NO_ANALYTICS := 1
export PREFECT_SERVER_ANALYTICS_ENABLED := false
export GX_ANALYTICS_ENABLED := false
export PATH := $(CURDIR)/$(VENV)/bin:$(PATH)
# Python caches the bytecode of each module the first time a process imports it (its default; some machines,
# this one included, set PYTHONDONTWRITEBYTECODE=1): every stage, worker and server imports torch/TVM/MLflow/GE/
# Prefect, and without a cache each process compiled them from source again. Compiling all 25,567 installed
# files at install instead cost ~50 s of CPU for the ~30% the pipeline imports (results/pipeline-cpu.md, s. 7)
unexport PYTHONDONTWRITEBYTECODE

.PHONY: setup pipeline test test-fast lint

setup:
	bash scripts/bootstrap.sh

pipeline: setup
	dvc pull -q data.dvc || true
	dvc repro

test: setup
	bash scripts/run-tests.sh

test-fast: setup
	bash scripts/run-tests.sh -m "not slow"

# ruff (rules in pyproject.toml); CI runs it after the tests (.ci/run)
lint: setup
	ruff check src tests flows benchmarks scripts

# Prefect UI + MLflow UI + the served scheduled-retraining deployment on 127.0.0.1 (README, "Operations")
services: setup
	dragon services up
