"""Import path kept from the flat layout.

The callback handlers: ``langchain_om.integrations.callbacks``.
"""

from .integrations.callbacks import *  # noqa: F403
