"""Import path kept from the flat layout.

The configuration models: ``langchain_om.foundation.config``.
"""

from .foundation.config import *  # noqa: F403
