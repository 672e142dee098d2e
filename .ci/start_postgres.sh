# shellcheck shell=bash
# Start a private, throw-away PostgreSQL cluster for the test suite.
#
# Source it (so the exported DSN reaches your shell), then stop it when done:
#     source .ci/start_postgres.sh      # exports LANGCHAIN_OM_TEST_PG_DSN
#     python -m pytest -q
#     om_pg_stop
#
# The cluster lives in a fresh mktemp dir under /tmp, listens on 127.0.0.1 at a
# free port with trust auth, and owns database `om_test`. Under root (CI) every
# server command runs as the `postgres` OS user, because postgres refuses root.
# Nothing here uses `set -e`: sourcing it must never kill the caller's shell.

OM_PG_BIN="${OM_PG_BIN:-/usr/lib/postgresql/15/bin}"
if [ ! -x "$OM_PG_BIN/initdb" ]; then
    if command -v pg_config >/dev/null 2>&1 && [ -x "$(pg_config --bindir)/initdb" ]; then
        OM_PG_BIN="$(pg_config --bindir)"
    else
        echo "start_postgres: no initdb in $OM_PG_BIN (set OM_PG_BIN)" >&2
        return 1 2>/dev/null || exit 1
    fi
fi

_om_pg_as_owner() {
    # Run a server command as the cluster owner: `postgres` under root, else the caller.
    if [ "$(id -u)" = "0" ]; then
        runuser -u postgres -- "$@"
    else
        "$@"
    fi
}

om_pg_stop() {
    # Stop the cluster started by om_pg_start and delete its files (safe to call twice).
    if [ -n "${OM_PG_DIR:-}" ] && [ -d "$OM_PG_DIR" ]; then
        if [ -f "$OM_PG_DIR/data/postmaster.pid" ]; then
            _om_pg_as_owner "$OM_PG_BIN/pg_ctl" -D "$OM_PG_DIR/data" -m fast -w stop >/dev/null 2>&1 || true
        fi
        rm -rf "$OM_PG_DIR"
    fi
    OM_PG_DIR=""
}

om_pg_start() {
    local py port
    py="${PYTHON:-python3}"
    command -v "$py" >/dev/null 2>&1 || py=python
    OM_PG_DIR="$(mktemp -d /tmp/om-pg.XXXXXX)" || return 1
    if [ "$(id -u)" = "0" ]; then
        chown postgres: "$OM_PG_DIR" || return 1
    fi
    chmod 700 "$OM_PG_DIR"
    port="$("$py" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1]); s.close()')" || return 1

    if ! _om_pg_as_owner "$OM_PG_BIN/initdb" -D "$OM_PG_DIR/data" -U postgres --auth=trust \
            --encoding=UTF8 --no-locale >"$OM_PG_DIR/initdb.log" 2>&1; then
        echo "start_postgres: initdb failed:" >&2
        cat "$OM_PG_DIR/initdb.log" >&2
        om_pg_stop
        return 1
    fi
    if ! _om_pg_as_owner "$OM_PG_BIN/pg_ctl" -D "$OM_PG_DIR/data" -l "$OM_PG_DIR/server.log" -w -t 60 \
            -o "-k $OM_PG_DIR -p $port -c listen_addresses=127.0.0.1 -c fsync=${OM_PG_FSYNC:-off}" start >/dev/null; then
        echo "start_postgres: server did not start:" >&2
        cat "$OM_PG_DIR/server.log" >&2
        om_pg_stop
        return 1
    fi
    if ! _om_pg_as_owner "$OM_PG_BIN/createdb" -h 127.0.0.1 -p "$port" -U postgres om_test; then
        echo "start_postgres: createdb om_test failed" >&2
        om_pg_stop
        return 1
    fi
    export OM_PG_DIR OM_PG_PORT="$port"
    export LANGCHAIN_OM_TEST_PG_DSN="postgresql://postgres@127.0.0.1:$port/om_test"
    echo "start_postgres: PostgreSQL running, LANGCHAIN_OM_TEST_PG_DSN=$LANGCHAIN_OM_TEST_PG_DSN" >&2
}

om_pg_start || { return 1 2>/dev/null || exit 1; }
