#!/usr/bin/env bash
# `langchain-om` without activating the venv: sets up ./.venv if needed, then runs the console
# script in the folder you call it from.
#   ./scripts/langchain-om.sh inspect demo-trip --db langchain_om.db
#   ./scripts/langchain-om.sh eval longmemeval --data tests/data/longmemeval_mini.json --model scripted
# It uses the extras already installed (a fresh clone gets the demo's: both providers).
# shellcheck disable=SC1091
. "$(dirname "${BASH_SOURCE[0]}")/_venv.sh"
cd "$om_caller_dir" || exit 1
# the commands the demo prints (inspect ...) then go through the wrapper: they work without the venv
export LANGCHAIN_OM_LAUNCHER="$om_root/scripts/langchain-om.sh"
exec langchain-om "$@"
