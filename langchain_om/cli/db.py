"""Checks of a ``--db`` path before the CLI opens it.

Opening a SQLite file writes to it (WAL mode, schema migration), so the CLI looks first: a
wrong path fails in one line naming ``--db``, a missing directory is never created behind
the user's back, and a file that is not a healthy database is left byte for byte as it was.
"""

from __future__ import annotations

import os
import sqlite3
import stat
from pathlib import Path
from urllib.parse import quote

from ..store.sqlite.schema import is_om_database

SQLITE_HEADER = b"SQLite format 3\x00"


class DatabasePathError(ValueError):
    """The ``--db`` path cannot be used; the message names the option and the reason."""


def check_db_path(path: str, *, must_exist: bool, writable: bool, option: str = "--db") -> None:
    """Raise ``DatabasePathError`` unless ``path`` can be opened as asked.

    ``must_exist``: the file has to be there already (``inspect``); otherwise its directory has
    to exist. ``writable``: the caller will write (``demo``, ``eval``).
    """
    if path == ":memory:":
        return
    file = Path(path).expanduser()
    if file.is_dir():
        raise DatabasePathError(f"{option}: {path} is a directory, not a database file")
    if not file.exists():
        if must_exist:
            raise DatabasePathError(f"{option}: no such database file: {path}")
        folder = file.parent
        if not folder.is_dir():
            raise DatabasePathError(f"{option}: directory {folder} does not exist (langchain-om does not create "
                                    "directories; create it first)")
        if writable and not os.access(folder, os.W_OK):
            raise DatabasePathError(f"{option}: cannot create {path}: directory {folder} is not writable")
        return
    if not file.is_file():
        raise DatabasePathError(f"{option}: {path} is not a regular file")
    if writable and (not os.access(file, os.W_OK) or not file.stat().st_mode & (stat.S_IWUSR | stat.S_IWGRP
                                                                                 | stat.S_IWOTH)):
        raise DatabasePathError(f"{option}: {path} is read-only")
    if not os.access(file, os.R_OK):
        raise DatabasePathError(f"{option}: {path} is not readable (permission denied)")
    if writable and not os.access(file.parent, os.W_OK):
        raise DatabasePathError(f"{option}: directory {file.parent} is not writable (SQLite keeps its "
                                "write-ahead log next to the database)")
    check_db_health(file, option=option)


def check_db_health(file: Path, *, option: str = "--db") -> None:
    """An existing file must be an intact SQLite database holding langchain-om's schema (or nothing yet).

    OM's files carry its ``PRAGMA application_id`` (files written before it: OM's core tables with
    their columns); a table named ``schema_version`` alone proves nothing.

    Read-only: the file is opened with ``mode=ro`` and checked with ``PRAGMA quick_check``
    (``quick_check`` reads the whole file: milliseconds for a demo database, about a second per GB).
    """
    if file.stat().st_size == 0:
        return  # SQLite treats an empty file as a new database
    with file.open("rb") as handle:
        header = handle.read(len(SQLITE_HEADER))
    if header != SQLITE_HEADER:
        raise DatabasePathError(f"{option}: {file} is not a SQLite database (left untouched)")
    # immutable: no lock files and no write-ahead log are created next to a file that may not be ours;
    # only when a log is already there must SQLite read it (plain read-only mode)
    immutable = "" if Path(f"{file}-wal").exists() else "&immutable=1"
    try:
        conn = sqlite3.connect(f"file:{quote(str(file.resolve()))}?mode=ro{immutable}", uri=True)
        try:
            verdict = conn.execute("PRAGMA quick_check").fetchone()
            tables = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            stamp = int(conn.execute("PRAGMA application_id").fetchone()[0])
            ours = is_om_database(conn)
        finally:
            conn.close()
    except sqlite3.Error as exc:
        raise DatabasePathError(f"{option}: {file} is damaged or unreadable ({exc}); left untouched") from exc
    if verdict is None or verdict[0] != "ok":
        detail = verdict[0] if verdict else "no verdict"
        raise DatabasePathError(f"{option}: {file} is corrupt (integrity check: {detail}); left untouched")
    if not ours and (tables or stamp):  # an empty, unstamped file is a new database
        owner = f"application id {stamp:#010x}" if stamp else f"tables: {', '.join(sorted(tables)[:5])}"
        raise DatabasePathError(f"{option}: {file} is a SQLite database of another application "
                                f"({owner}); left untouched")
