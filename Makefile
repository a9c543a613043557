# The two commands of the README (both set up the environment first, idempotently):
#   make demo   the main job: DINO-pretrain a small DinoVim on synthetic data that it generates
#               (data/synthetic_demo, on first use), linear-probe it against a random init,
#               print the table
#   make test   the test suite (slow tests excluded; `make test-slow` runs those)
VENV ?= .venv
PYTHON := $(VENV)/bin/python
PYTEST_ARGS ?=

.PHONY: env demo test test-slow data clean-env

env:
	@bash tools/setup_env.sh $(VENV)

demo: env
	$(PYTHON) tools/demo.py $(DEMO_ARGS)

test: env
	$(PYTHON) -m pytest $(PYTEST_ARGS)

test-slow: env
	$(PYTHON) -m pytest -m slow $(PYTEST_ARGS)

data: env
	$(PYTHON) tools/data/make_synthetic.py --out data/synthetic --seed 0

clean-env:
	rm -rf $(VENV)
