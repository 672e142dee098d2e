"""langchain-om benchmark suite: ``python -m benchmarks`` (see benchmarks/README.md)."""

SECTIONS = ("buffering", "step_cost", "prompt_tokens", "token_counting", "storage")

__all__ = ["SECTIONS"]
