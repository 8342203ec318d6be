# BRACE-ROS workspace. `make demo` and `make test` are the two commands of the README.
SHELL := /bin/bash
.DEFAULT_GOAL := help
ENV := source scripts/env.sh

.PHONY: help setup test lint demo bench clean

help:
	@echo "make setup  - create .venv (ROS 2 Kilted wheels, torch CPU, pinned deps) and colcon-build src/"
	@echo "make test   - setup, ruff, then every package's tests"
	@echo "make demo   - setup, then the main job on the embedded default"
	@echo "make bench  - setup, then the benchmarks under bench/"

setup:
	@bash scripts/setup.sh

lint: setup
	@$(ENV) && ruff check .

test: setup lint
	@$(ENV) && bash scripts/run_tests.sh

demo: setup
	@$(ENV) && python bench/controller_overhead.py --quick

bench: setup
	@$(ENV) && python bench/controller_overhead.py

clean:
	rm -rf build install log
