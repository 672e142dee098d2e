"""Foundation layer: what every other layer speaks in.

Configuration (pydantic, validated at construction), the data-part events and their delivery
into a run, messages and their stored form, token counting, turns and the window of unobserved
messages. Depends only on ``store``; nothing here knows about models or the engine.
"""
