# shellcheck shell=bash
# Shared by the scripts: create ./.venv if missing, install the package with the extras the calling
# script asks for (OM_EXTRAS: "openai,google" for the demo, "test,docs,all" for the suite; none asked:
# whatever is installed) when one is missing or pyproject.toml is newer than the last install, and
# activate the venv. The stamp file holds the extras installed, so a second script adds to them.
# What it does and roughly how long goes to stderr, with a line every 15 s while pip works.
# It works in the repository root; om_caller_dir keeps the folder the user ran the script from.
om_caller_dir="$PWD"
om_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$om_root" || exit 1
if [ ! -x .venv/bin/python ]; then
    echo "langchain-om: creating ./.venv (a few seconds)" >&2
    python3 -m venv .venv || { echo "could not create .venv (need python3 >= 3.10 with venv)" >&2; exit 1; }
fi
# shellcheck disable=SC1091
. .venv/bin/activate
om_stamp=.venv/.langchain-om-installed
om_installed="$(cat "$om_stamp" 2>/dev/null || true)"
om_wanted="$om_installed"
for om_extra in ${OM_EXTRAS//,/ }; do
    case ",$om_wanted," in
        *",$om_extra,"*) ;;
        *) om_wanted="${om_wanted:+$om_wanted,}$om_extra" ;;
    esac
done
[ -n "$om_wanted" ] || om_wanted="openai,google"
if [ ! -f "$om_stamp" ] || [ "$om_wanted" != "$om_installed" ] || [ pyproject.toml -nt "$om_stamp" ] \
        || ! command -v langchain-om >/dev/null 2>&1; then
    case ",$om_wanted," in
        *,test,*) om_expect="3-5 minutes the first time (the test and docs tools, both providers, PostgreSQL)" ;;
        *) om_expect="about 1 minute the first time" ;;
    esac
    echo "langchain-om: installing the package with extras [$om_wanted] into ./.venv: $om_expect" >&2
    om_started=$SECONDS
    ( while sleep 15; do echo "langchain-om: ... still installing ($((SECONDS - om_started)) s)" >&2; done ) &
    om_ticker=$!
    python -m pip install -q --upgrade pip >/dev/null 2>&1 || true
    python -m pip install -q -e ".[$om_wanted]"
    om_pip_status=$?
    kill "$om_ticker" 2>/dev/null
    wait "$om_ticker" 2>/dev/null
    if [ "$om_pip_status" -ne 0 ]; then
        echo "pip install failed" >&2
        exit 1
    fi
    echo "$om_wanted" > "$om_stamp"
    echo "langchain-om: installed in $((SECONDS - om_started)) s. The langchain-om command is in ./.venv:" \
         "run 'source .venv/bin/activate' first, or call ./scripts/langchain-om.sh (no activation needed)" >&2
fi
