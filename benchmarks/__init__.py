"""langchain-om benchmark suite: ``python -m benchmarks`` (see benchmarks/README.md)."""

SECTIONS = (
    "buffering",
    "step_cost",
    "agent_step",
    "prompt_tokens",
    "prompt_cache",
    "token_counting",
    "storage",
    "search",
    "search_languages",
    "vector_restart",
    "scale",
    "branches",
    "wirings",
    "cache_misses",
    "reflector_spend",
    "import_time",
    "load",
    "workers",
    "own_work",
)
OPT_IN = ("workers", "own_work")
"""Sections ``python -m benchmarks`` runs only when named in ``--only`` (minutes each; ``own_work``
is meant to be run with ``--baseline`` beside another checkout)."""

__all__ = ["OPT_IN", "SECTIONS"]
