"""Import path kept from the flat layout.

The AI SDK UI stream adapter: ``langchain_om.integrations.ui``.
"""

from .integrations.ui import *  # noqa: F403
