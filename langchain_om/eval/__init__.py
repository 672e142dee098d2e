"""Evaluation harnesses (``langchain-om eval ...``)."""

from __future__ import annotations

from .longmemeval import (
    EvalSettings,
    EvalSummary,
    LongMemEvalDataError,
    LongMemEvalItem,
    arun_longmemeval,
    load_longmemeval,
    run_longmemeval,
)

__all__ = [
    "EvalSettings",
    "EvalSummary",
    "LongMemEvalDataError",
    "LongMemEvalItem",
    "arun_longmemeval",
    "load_longmemeval",
    "run_longmemeval",
]
