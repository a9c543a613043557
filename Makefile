# The two commands of the README (both set up the environment first, idempotently):
#   make demo   the main job: the paper's findings in miniature on the 64 px synthetic scenes it
#               generates (data/synthetic_demo, on first use) and the models shipped in
#               checkpoints/demo (DINO ViT / LinearViT / DinoVim, supervised DinoVim): the rank of
#               the token-mixing matrices, linear probes, class-token maps and their Binary-AUC by
#               block, a linear segmentation head; prints the tables and a verdict per ordering
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
