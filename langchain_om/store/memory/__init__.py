"""The in-process backend, for tests and notebooks: plain dicts behind one lock.

Layout: ``store`` (``InMemoryStore``: threads, messages, records, search and vectors, every value
crossing the boundary as a JSON copy) and ``threads`` (the thread listing). It has no connection
and no schema, so those modules of the other backends have no twin here.
"""

from .store import InMemoryStore

__all__ = ["InMemoryStore"]
