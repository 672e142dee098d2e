"""Import path kept from the flat layout.

The create_agent middleware: ``langchain_om.integrations.middleware``.
"""

from .integrations.middleware import *  # noqa: F403
