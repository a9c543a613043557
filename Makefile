# The two commands of the README (both set up the environment first, idempotently):
#   make demo   the main job: on synthetic data it generates (data/synthetic_demo, on first use)
#               and the small DINO models shipped in checkpoints/demo, the rank of the token-
#               mixing matrices, the class-token maps of DinoVim / ViT / LinearViT with their
#               Binary-AUC, a linear probe of DINO vs random init; prints the tables
#               (DEMO_ARGS=--quick: smoke test; DEMO_ARGS=--pretrain: re-create the checkpoints)
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
