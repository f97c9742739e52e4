# The two set-up commands of the README: `make run` and `make test`.
.PHONY: run test lint factory-demo
ARGS ?=

run:
	bash scripts/run.sh

test:
	bash scripts/test.sh $(ARGS)

lint:
	bash scripts/venv.sh test && .venv/bin/ruff check .

# Not a set-up command: the simulated GPU factory (real Kubernetes control plane, Kueue,
# kube-scheduler, kwok nodes) with the portal and a load generator, for people to watch.
factory-demo:
	bash scripts/test.sh tests/k8s/factory_demo.py -n 0 -s -q -p no:cacheprovider $(ARGS)
