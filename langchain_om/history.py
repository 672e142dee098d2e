"""Import path kept from the flat layout.

The BaseChatMessageHistory replacement: ``langchain_om.integrations.history``.
"""

from .integrations.history import *  # noqa: F403
