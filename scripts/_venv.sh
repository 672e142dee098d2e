# shellcheck shell=bash
# Shared by the scripts: create ./.venv if missing, install the package with the test and docs extras
# when pyproject.toml is newer than the last install, and activate the venv. It works in the
# repository root; om_caller_dir keeps the folder the user ran the script from.
om_caller_dir="$PWD"
om_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$om_root" || exit 1
if [ ! -x .venv/bin/python ]; then
    python3 -m venv .venv || { echo "could not create .venv (need python3 >= 3.10 with venv)" >&2; exit 1; }
fi
# shellcheck disable=SC1091
. .venv/bin/activate
stamp=.venv/.langchain-om-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ] || ! command -v langchain-om >/dev/null 2>&1; then
    python -m pip install -q --upgrade pip >/dev/null 2>&1 || true
    python -m pip install -q -e ".[test,docs]" || { echo "pip install failed" >&2; exit 1; }
    touch "$stamp"
fi
