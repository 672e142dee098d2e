"""langchain-om benchmark suite: ``python -m benchmarks`` (see benchmarks/README.md)."""

SECTIONS = ("buffering", "step_cost", "agent_step", "prompt_tokens", "token_counting", "storage", "search",
            "search_languages", "scale", "branches")

__all__ = ["SECTIONS"]
