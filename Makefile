# The two set-up commands of the README: `make run` and `make test`.
.PHONY: run test lint
ARGS ?=

run:
	bash scripts/run.sh

test:
	bash scripts/test.sh $(ARGS)

lint:
	bash scripts/venv.sh test && .venv/bin/ruff check .
