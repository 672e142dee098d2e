"""Import path kept from the flat layout.

The LangGraph nodes: ``langchain_om.integrations.graph``.
"""

from .integrations.graph import *  # noqa: F403
