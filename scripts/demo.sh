#!/usr/bin/env bash
# One command on a fresh machine: set up ./.venv and run the demo (extra args go to `langchain-om demo`).
#   ./scripts/demo.sh                       # offline, scripted Observer/Reflector
#   ./scripts/demo.sh --model openai:gpt-5-mini
# shellcheck disable=SC1091
. "$(dirname "${BASH_SOURCE[0]}")/_venv.sh"
exec langchain-om demo "$@"
