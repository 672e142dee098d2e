"""Observer and Reflector calls whose replies are checked before anything uses them.

``acall_observer`` and ``acall_reflector`` call the model (``models.acall_om_model``: fallback
chain, transport retries, timeouts), refuse a reply that loops (``degenerate.degeneracy``) and
ask once more, then parse the reply. A second looping reply raises ``DegenerateReplyError``, an
``OMModelError``: the engine and ``failure_policy`` treat it like a model that failed (the cycle
fails, nothing is committed or buffered, the messages stay pending, the failure event carries the
reason), and the Reflector's compression ladder stops instead of accepting a loop as "compressed".
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any, TypeVar

from langchain_core.messages import BaseMessage

from .degenerate import degeneracy
from .failures import FAILURE_LOG, ErrorKind
from .models import OMModelError
from .om_calls import ModelCallResult, acall_om_model, message_text
from .reflector import ReflectorResult, parse_reflector_output
from .reply_parsing import ObserverResult, parse_observer_output

__all__ = ["DEGENERATE_RETRIES", "DegenerateReply", "DegenerateReplyError", "acall_observer", "acall_reflector"]

DEGENERATE_RETRIES = 1
"""Fresh calls after a looping reply. A loop is usually a sampling accident that the next call
does not repeat; a model that loops twice on the same prompt will likely keep doing it, and each
loop costs up to the whole output limit, so the cycle fails and a later step tries again."""

_Parsed = TypeVar("_Parsed")
_USAGE_KEYS = ("input_tokens", "output_tokens", "total_tokens")


class DegenerateReply(ValueError):
    """One looping reply (the entry of ``DegenerateReplyError.errors``); ``str`` is the reason."""


class DegenerateReplyError(OMModelError):
    """The model looped on every try (``1 + DEGENERATE_RETRIES`` replies); nothing was used."""

    @property
    def kind(self) -> ErrorKind:
        """Always ``"transient"``: the same model may answer well on the next cycle."""
        return "transient"

    def reason(self) -> str:
        """One line: the model and why its last reply was refused."""
        name, _attempt, exc = self.errors[-1]
        return f"{self.role} model {name}: degenerate reply (refused {self.refusals} times): {exc}"

    @property
    def refusals(self) -> int:
        return sum(1 for _name, _attempt, exc in self.errors if isinstance(exc, DegenerateReply))


async def acall_observer(
    spec: Any, prompt: Sequence[BaseMessage], *, inline_slugs: Sequence[str] = (), **call: Any
) -> tuple[ModelCallResult, ObserverResult]:
    """The Observer's reply to ``prompt``, checked and parsed (``call``: ``acall_om_model``'s options)."""
    return await _acall_checked(
        spec, prompt, role="observer", parse=lambda text: parse_observer_output(text, inline_slugs=inline_slugs),
        **call)


async def acall_reflector(
    spec: Any, prompt: Sequence[BaseMessage], *, inline_slugs: Sequence[str] = (), **call: Any
) -> tuple[ModelCallResult, ReflectorResult]:
    """The Reflector's reply to ``prompt``, checked and parsed (``call``: ``acall_om_model``'s options)."""
    return await _acall_checked(
        spec, prompt, role="reflector", parse=lambda text: parse_reflector_output(text, inline_slugs=inline_slugs),
        **call)


async def _acall_checked(
    spec: Any, prompt: Sequence[BaseMessage], *, role: str, parse: Callable[[str], _Parsed], **call: Any
) -> tuple[ModelCallResult, _Parsed]:
    # repetition the prompt holds (an old log that repeats itself, a pasted file) is not a loop
    baseline = "\n".join(message_text(message) for message in prompt)
    errors: list[tuple[str, int, BaseException]] = []
    refused: list[ModelCallResult] = []
    for attempt in range(1 + DEGENERATE_RETRIES):
        result = await acall_om_model(spec, prompt, role=role, **call)
        errors.extend(result.errors)
        reason = degeneracy(result.text, baseline=baseline)
        if reason is None:
            merged = _with_refused(result, refused, errors)
            return merged, parse(result.text)
        problem = DegenerateReply(reason)
        errors.append((result.model_name, attempt + 1, problem))
        refused.append(result)
        FAILURE_LOG.report(role, result.model_name, problem, "transient")
    raise DegenerateReplyError(role, errors)


def _with_refused(
    result: ModelCallResult, refused: Sequence[ModelCallResult], errors: list[tuple[str, int, BaseException]]
) -> ModelCallResult:
    """``result`` charged with the tokens of the refused replies (they were paid for too)."""
    if not refused:
        return result
    usage = dict(result.usage or {})
    for earlier in refused:
        for key in _USAGE_KEYS:
            if earlier.usage and key in earlier.usage:
                usage[key] = int(usage.get(key) or 0) + int(earlier.usage[key] or 0)
    attempts = result.attempts + sum(earlier.attempts for earlier in refused)
    return replace(result, usage=usage or None, attempts=attempts, errors=list(errors))
