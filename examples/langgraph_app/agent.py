"""A create_agent agent with Observational Memory, served by the LangGraph server.

``langgraph dev`` (or a LangGraph deployment) imports ``graph`` from this file. The server
owns the conversation (its checkpointer keeps every thread's messages); OM keeps its
observation log in its own store, chosen by environment variables:

- ``LANGCHAIN_OM_PG_DSN`` set: PostgreSQL (several workers may share it), in the schema
  ``LANGCHAIN_OM_PG_SCHEMA`` (default ``langchain_om``);
- otherwise SQLite at ``LANGCHAIN_OM_DB`` (default ``./langchain_om.db`` next to the server).

Models, chosen by environment variables so the example also runs offline:

- ``OM_EXAMPLE_MODEL``: the agent's model (``"openai:gpt-4o-mini"``, any ``init_chat_model``
  id); unset, a scripted offline model that streams its replies word by word;
- ``OM_EXAMPLE_OM_MODEL``: the Observer/Reflector model; unset, the scripted offline observer.
- ``OM_EXAMPLE_MESSAGE_TOKENS``: the observation threshold (small values show OM at work soon).

OM's ``data-om-*`` parts go to the run's custom stream (``stream_mode="custom"``). A client
using ``@ai-sdk/langchain``'s ``toUIMessageStream`` passes
``config.configurable.om_stream_format = "ai-sdk-langchain"`` in the run to get them as
``data-om-*`` parts whose ``data`` holds the reference fields.
"""

from __future__ import annotations

import os
from typing import Any

from langchain.agents import create_agent
from langchain.chat_models import init_chat_model
from langchain_core.tools import tool

from langchain_om import ObservationalMemory, ObservationalMemoryMiddleware
from langchain_om.store import OMStore, PostgresStore, default_store
from langchain_om.testing import ScriptedAgentModel, ScriptedObserverModel


def om_store() -> OMStore:
    """PostgreSQL when a DSN is set, else the SQLite file (the package default)."""
    dsn = os.environ.get("LANGCHAIN_OM_PG_DSN", "").strip()
    if dsn:
        return PostgresStore(dsn, schema=os.environ.get("LANGCHAIN_OM_PG_SCHEMA") or "langchain_om")
    return default_store()


def agent_model() -> Any:
    name = os.environ.get("OM_EXAMPLE_MODEL", "").strip()
    return init_chat_model(name) if name else ScriptedAgentModel(stream_tokens=True)


def om_model() -> Any:
    name = os.environ.get("OM_EXAMPLE_OM_MODEL", "").strip()
    return name or ScriptedObserverModel()


@tool
def lookup_price(item: str) -> str:
    """Look up the price of an item in the shop."""
    return f"{item} costs 12 dollars"


memory = ObservationalMemory(
    om_store(),
    model=om_model(),
    observation={"message_tokens": int(os.environ.get("OM_EXAMPLE_MESSAGE_TOKENS", "30000"))},
)

# No checkpointer here: the LangGraph server supplies its own and passes thread_id in the config.
graph = create_agent(agent_model(), [lookup_price], middleware=[ObservationalMemoryMiddleware(memory)],
                     system_prompt="You are a helpful shop assistant.")
