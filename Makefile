.PHONY: run test lint format demo-reset

# Install, migrate, load the demo fleet and serve web + worker + beat on embedded defaults.
run:
	sh scripts/run.sh

# The whole test suite on real PostgreSQL and Redis, plus ruff. `.ci/run` calls exactly this.
test:
	sh scripts/test.sh

lint:
	.venv/bin/ruff check .
	.venv/bin/ruff format --check .

format:
	.venv/bin/ruff check --fix .
	.venv/bin/ruff format .

demo-reset:
	rm -rf var/
