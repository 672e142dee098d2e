"""``langchain-om serve``: the memory inspector in the browser (integrations/inspector.py).

Bound to 127.0.0.1 unless ``--host`` says otherwise: the page shows every thread of the database
to whoever reaches the port. Needs the ``[ui]`` extra (Starlette and uvicorn); without it the
command ends in one line naming the extra.
"""

from __future__ import annotations

import argparse
from typing import Any

from rich.console import Console

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8765


def add_serve_parser(sub: Any, identifier: Any, positive_int: Any, default_db_help: str) -> None:
    serve = sub.add_parser(
        "serve", help="open the memory inspector in the browser (needs the [ui] extra)",
        description="Serve a read-only page at http://HOST:PORT/ showing the threads of a database, and for a "
                    "thread its observation log as the model sees it, both windows against their thresholds, "
                    "the cycles, the spend and the raw messages behind each group; it follows a conversation "
                    "while an agent talks on the same database.")
    serve.add_argument("--db", type=identifier("--db"), default=None, help=default_db_help)
    serve.add_argument("--host", default=DEFAULT_HOST,
                       help="address to listen on (default: %(default)s, this machine only; anyone who reaches "
                            "the port can read every thread)")
    serve.add_argument("--port", type=positive_int, default=DEFAULT_PORT, help="port (default: %(default)s)")
    serve.add_argument("--resource", type=identifier("--resource"), default=None,
                       help="open the page on this resource's threads (the user id the app passes)")
    serve.add_argument("--message-tokens", type=positive_int, default=None,
                       help="threshold to draw the message window against (default: what the writer recorded, "
                            "else 30000)")
    serve.add_argument("--observation-tokens", type=positive_int, default=None,
                       help="threshold to draw the observation window against (default: recorded, else 40000)")


def cmd_serve(args: argparse.Namespace, db: str, console: Console) -> int:
    from ..foundation.extras import require_modules

    require_modules("langchain-om serve", ["starlette", "uvicorn"], "ui")
    import uvicorn

    from ..integrations.inspector import create_inspector_app
    from ..store.sqlite import SQLiteStore

    app = create_inspector_app(SQLiteStore(db), message_tokens=args.message_tokens,
                               observation_tokens=args.observation_tokens)
    host = f"[{args.host}]" if ":" in args.host else args.host
    anchor = f"#resource={args.resource}" if args.resource else ""
    console.print(f"Memory inspector for {db} at http://{host}:{args.port}/{anchor} (read-only; Ctrl+C stops it)",
                  highlight=False, soft_wrap=True)
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning")
    return 0
