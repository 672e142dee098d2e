"""``python -m langchain_om`` runs the ``langchain-om`` console script (same commands and exit codes)."""

from .cli.commands import main

raise SystemExit(main())
