"""Which step of its run an OM step is: the ``stepNumber`` of ``data-om-status``.

The reference counts ``stepNumber`` once per agent loop step, from 0, within the current run:
the first model call of an ``invoke`` / ``stream`` is step 0, the call after a tool round is
step 1, and the next run starts at 0 again. OM only sees the step's ``RunnableConfig``, so it
recognises the run from it, first match wins:

1. **A LangGraph run** (``create_agent`` middleware, the graph nodes, ``om_pre_model_hook``):
   every ``invoke`` / ``stream`` of a graph creates one ``RunControl`` and hands the same object
   to all its tasks, in the runtime under ``config["configurable"]["__pregel_runtime"]`` (where
   ``langgraph.runtime.get_runtime`` reads it). Nodes see a different callback parent each
   (their own node run), so the run control is the one mark all steps of a run share. A graph
   called from inside another graph's node shares the outer run's control, so its steps count
   within the outer run.
2. **``config["run_id"]``**: a caller driving its own loop of ``aprocess`` calls groups them
   into one run by passing the same ``run_id``.
3. **The parent run of ``config["callbacks"]``** (a callback manager, as LangChain hands a
   runnable its config): ``aprocess`` called from inside one LangChain run, e.g. a
   ``RunnableLambda`` running an agent loop, counts the steps of that run.

A step with none of these is a run of its own: step 0.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from langchain_core.callbacks import BaseCallbackManager
from langchain_core.runnables import RunnableConfig

_RUNTIME_KEY = "__pregel_runtime"  # langgraph's CONFIG_KEY_RUNTIME; get_runtime() reads the same key

MarkKind = Literal["graph", "run_id", "parent_run"]


@dataclass(frozen=True, eq=False)
class RunMark:
    """What identifies a run. A graph run's mark holds its ``RunControl`` object itself (compared
    by identity, and kept alive by the mark so its id cannot be reused by a later run); the other
    kinds hold a run id, compared by value."""

    kind: MarkKind
    token: object

    def same_run(self, other: RunMark | None) -> bool:
        if other is None or other.kind != self.kind:
            return False
        if self.kind == "graph":
            return self.token is other.token
        return self.token == other.token


def run_mark(config: RunnableConfig | Mapping[str, Any] | None) -> RunMark | None:
    """The run a step belongs to, read from its config (see the module docstring), or None."""
    if not config:
        return None
    configurable = config.get("configurable")
    if isinstance(configurable, Mapping):
        control = getattr(configurable.get(_RUNTIME_KEY), "control", None)
        if control is not None:
            return RunMark("graph", control)
    run_id = config.get("run_id")
    if run_id is not None:
        return RunMark("run_id", str(run_id))
    callbacks = config.get("callbacks")
    parent = getattr(callbacks, "parent_run_id", None) if isinstance(callbacks, BaseCallbackManager) else None
    if parent is not None:
        return RunMark("parent_run", str(parent))
    return None


class RunSteps:
    """Per record key: the run of its last step and that step's number. At most one entry per
    key and at most ``limit`` keys (the least recently stepped are forgotten; their next step
    starts a run, as after a restart)."""

    def __init__(self) -> None:
        self._entries: OrderedDict[str, tuple[RunMark | None, int]] = OrderedDict()

    def close_step(self, key: str, mark: RunMark | None, limit: int) -> int:
        """Number the step that just closed on ``key``: 0 for the first step of a run (or a step
        with no run), else one more than the run's previous step."""
        previous = self._entries.get(key)
        number = 0
        if mark is not None and previous is not None and mark.same_run(previous[0]):
            number = previous[1] + 1
        self._entries[key] = (mark, number)
        self._entries.move_to_end(key)
        while len(self._entries) > max(1, limit):
            self._entries.popitem(last=False)
        return number

    def last(self, key: str) -> int:
        """The number of the last step closed on ``key`` (0 when none is remembered)."""
        entry = self._entries.get(key)
        return entry[1] if entry is not None else 0

    def forget(self, key: str) -> None:
        self._entries.pop(key, None)

    def __len__(self) -> int:
        return len(self._entries)
