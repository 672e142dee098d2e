"""The ``langchain-om`` console script: commands, the demo, database tools and hints.

The entry point is ``langchain_om.cli.commands:main`` (also ``python -m langchain_om``).
"""
