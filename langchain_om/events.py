"""Import path kept from the flat layout.

The data-part event models: ``langchain_om.foundation.events``.
"""

from .foundation.events import *  # noqa: F403
