#!/usr/bin/env bash
# One command on a fresh machine: set up ./.venv and run the demo (extra args go to `langchain-om demo`).
# It runs in the folder you call it from, so `--db mine.db` is ./mine.db there.
#   ./scripts/demo.sh                       # offline, scripted Observer/Reflector
#   ./scripts/demo.sh --model openai:gpt-5-mini
# The venv gets the package with both providers' extras (an API key in the environment picks a real model).
export OM_EXTRAS="openai,google"
# shellcheck disable=SC1091
. "$(dirname "${BASH_SOURCE[0]}")/_venv.sh"
cd "$om_caller_dir" || exit 1
# the commands the demo prints (inspect ...) then go through the wrapper: they work without the venv
export LANGCHAIN_OM_LAUNCHER="$om_root/scripts/langchain-om.sh"
langchain-om demo "$@"
status=$?
echo "langchain-om: to run more commands, 'source $om_root/.venv/bin/activate' then 'langchain-om --help'," \
     "or without activating: $om_root/scripts/langchain-om.sh --help" >&2
exit "$status"
