#!/usr/bin/env bash
# One command on a fresh machine: set up ./.venv and run the demo (extra args go to `langchain-om demo`).
# It runs in the folder you call it from, so `--db mine.db` is ./mine.db there.
#   ./scripts/demo.sh                       # offline, scripted Observer/Reflector
#   ./scripts/demo.sh --model openai:gpt-5-mini
# shellcheck disable=SC1091
. "$(dirname "${BASH_SOURCE[0]}")/_venv.sh"
cd "$om_caller_dir" || exit 1
# the commands the demo prints (inspect ...) then go through the wrapper: they work without the venv
export LANGCHAIN_OM_LAUNCHER="$om_root/scripts/langchain-om.sh"
exec langchain-om demo "$@"
