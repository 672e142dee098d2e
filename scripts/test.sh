#!/usr/bin/env bash
# One command on a fresh machine: set up ./.venv and run the test suite. The test command
# itself is `python -m pytest -q` (the same one .ci/run runs); extra args are passed to pytest.
# PostgreSQL cases run when LANGCHAIN_OM_TEST_PG_DSN is set (`source .ci/start_postgres.sh`).
# The whole suite takes about 11 minutes on 2 cores.
export OM_EXTRAS="test,docs,all"
# shellcheck disable=SC1091
. "$(dirname "${BASH_SOURCE[0]}")/_venv.sh"
echo "langchain-om: running the test suite (python -m pytest -q; about 11 minutes on 2 cores)" >&2
exec python -m pytest -q "$@"
