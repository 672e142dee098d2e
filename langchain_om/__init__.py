"""Observational Memory for LangGraph and LangChain."""
