"""Observer and Reflector calls whose replies are checked before anything uses them.

``acall_observer`` and ``acall_reflector`` call the model (``models.acall_om_model``: fallback
chain, transport retries, timeouts), refuse a reply that loops (``degenerate.degeneracy``) or is
not observations (``reply_checks``: a refusal, a greeting, the transcript or the prompt copied
back, lines with no resolved date) and ask once more, then use the parsed, repaired reply. A
second refused reply raises ``RefusedReplyError`` (``DegenerateReplyError`` when it looped), an
``OMModelError``: the engine and ``failure_policy`` treat it like a model that failed (the cycle
fails, nothing is committed or buffered, the messages stay pending, the failure event carries the
reason), and the Reflector's compression ladder stops instead of accepting a loop as "compressed".

A model that reports no token usage (a local model's wrapper often does not) is charged OM's own
count of the prompt and the reply (``count_tokens``), so spend and hooks never read zero.
``REPLY_TALLY`` counts replies refused, repaired and looping per role, for benchmarks and logs.
"""

from __future__ import annotations

import logging
import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any, TypeVar

from langchain_core.messages import BaseMessage, SystemMessage

from .degenerate import degeneracy
from .failures import FAILURE_LOG, ErrorKind
from .models import OMModelError
from .om_calls import ModelCallResult, acall_om_model, message_text
from .reflector import ReflectorOutputError, ReflectorResult, parse_reflector_output
from .reply_checks import (
    UnusableReply,
    check_hint,
    check_observations,
    check_reflection,
    describe_unusable,
    log_dates,
    transcript_dates,
)
from .reply_parsing import ObserverOutputError, ObserverResult, parse_observer_output

__all__ = [
    "DEGENERATE_RETRIES",
    "REPLY_TALLY",
    "DegenerateReply",
    "DegenerateReplyError",
    "RefusedReply",
    "RefusedReplyError",
    "acall_observer",
    "acall_reflector",
]

logger = logging.getLogger("langchain_om.model_calls.replies")

REPLY_TALLY: Counter[str] = Counter()
"""Process-wide counts, keyed ``"<role>:refused"``, ``"<role>:repaired"``, ``"<role>:degenerate"``."""

DEGENERATE_RETRIES = 1
"""Fresh calls after a looping reply. A loop is usually a sampling accident that the next call
does not repeat; a model that loops twice on the same prompt will likely keep doing it, and each
loop costs up to the whole output limit, so the cycle fails and a later step tries again."""

_Parsed = TypeVar("_Parsed")
_USAGE_KEYS = ("input_tokens", "output_tokens", "total_tokens")


class RefusedReply(ValueError):
    """One reply that is not observations (an entry of ``RefusedReplyError.errors``); ``str`` says why."""


class DegenerateReply(RefusedReply):
    """One looping reply (the entry of ``DegenerateReplyError.errors``); ``str`` is the reason."""


class RefusedReplyError(OMModelError):
    """Every try (``1 + DEGENERATE_RETRIES`` replies) was refused; nothing was used."""

    _what = "unusable reply"

    @property
    def kind(self) -> ErrorKind:
        """Always ``"transient"``: the same model may answer well on the next cycle."""
        return "transient"

    def reason(self) -> str:
        """One line: the model and why its last reply was refused."""
        name, _attempt, exc = self.errors[-1]
        return f"{self.role} model {name}: {self._what} (refused {self.refusals} times): {exc}"

    @property
    def refusals(self) -> int:
        return sum(1 for _name, _attempt, exc in self.errors if isinstance(exc, RefusedReply))


class DegenerateReplyError(RefusedReplyError):
    """The model's last refused reply looped."""

    _what = "degenerate reply"


async def acall_observer(
    spec: Any, prompt: Sequence[BaseMessage], *, inline_slugs: Sequence[str] = (),
    count_tokens: Callable[[str], int] | None = None, **call: Any
) -> tuple[ModelCallResult, ObserverResult]:
    """The Observer's reply to ``prompt``, checked, repaired and parsed (``call``: ``acall_om_model``'s
    options; ``count_tokens``: OM's counter, for a model that reports no usage)."""
    instructions = _system_text(prompt)
    dates = transcript_dates(_human_text(prompt))

    def parse(text: str) -> ObserverResult:
        parsed = parse_observer_output(text, inline_slugs=inline_slugs)
        tagged = not any(w.startswith("no <observations> tag") for w in parsed.warnings)
        parsed.observations, repairs = check_observations(
            parsed.observations, instructions=instructions, dates=dates, tagged=tagged)
        parsed.warnings.extend(repairs)
        for name in ("current_task", "suggested_response", "thread_title"):
            value = getattr(parsed, name)
            if check_hint(value, instructions) is None and value is not None:
                setattr(parsed, name, None)
                parsed.warnings.append(f"dropped the {name.replace('_', ' ')}: not a hint ({value[:60]!r})")
        return parsed

    return await _acall_checked(spec, prompt, role="observer", parse=parse, count_tokens=count_tokens, **call)


async def acall_reflector(
    spec: Any, prompt: Sequence[BaseMessage], *, inline_slugs: Sequence[str] = (),
    count_tokens: Callable[[str], int] | None = None, **call: Any
) -> tuple[ModelCallResult, ReflectorResult]:
    """The Reflector's reply to ``prompt``, checked and parsed (``call``: ``acall_om_model``'s options)."""
    instructions = _system_text(prompt)
    match = _LOG_RE.search(_human_text(prompt))
    source = match.group(1) if match else ""
    source_dates = log_dates(source)

    def parse(text: str) -> ReflectorResult:
        parsed = parse_reflector_output(text, inline_slugs=inline_slugs)
        parsed.observations, repairs = check_observations(
            parsed.observations, instructions=instructions, dates=source_dates, dated=bool(source_dates))
        check_reflection(source, parsed.observations)
        parsed.warnings.extend(repairs)
        parsed.current_task = check_hint(parsed.current_task, instructions)
        parsed.suggested_response = check_hint(parsed.suggested_response, instructions)
        return parsed

    return await _acall_checked(spec, prompt, role="reflector", parse=parse, count_tokens=count_tokens, **call)


_LOG_RE = re.compile(r"<observation-log>\n?(.*?)\n?</observation-log>", re.DOTALL)
_NOT_OBSERVATIONS = (ObserverOutputError, ReflectorOutputError, UnusableReply)


def _system_text(prompt: Sequence[BaseMessage]) -> str:
    return "\n".join(message_text(m) for m in prompt if isinstance(m, SystemMessage))


def _human_text(prompt: Sequence[BaseMessage]) -> str:
    return "\n".join(message_text(m) for m in prompt if not isinstance(m, SystemMessage))


async def _acall_checked(
    spec: Any, prompt: Sequence[BaseMessage], *, role: str, parse: Callable[[str], _Parsed],
    count_tokens: Callable[[str], int] | None = None, **call: Any
) -> tuple[ModelCallResult, _Parsed]:
    # repetition the prompt holds (an old log that repeats itself, a pasted file) is not a loop
    baseline = "\n".join(message_text(message) for message in prompt)
    errors: list[tuple[str, int, BaseException]] = []
    refused: list[ModelCallResult] = []
    for attempt in range(1 + DEGENERATE_RETRIES):
        result = await acall_om_model(spec, prompt, role=role, **call)
        if result.usage is None and count_tokens is not None:
            result = replace(result, usage=_counted_usage(count_tokens, baseline, result.text))
        errors.extend(result.errors)
        reason = degeneracy(result.text, baseline=baseline)
        problem: RefusedReply
        if reason is None:
            try:
                parsed = parse(result.text)
            except _NOT_OBSERVATIONS as exc:
                problem = RefusedReply(describe_unusable(result.text) or str(exc))
            else:
                if getattr(parsed, "warnings", None):
                    REPLY_TALLY[f"{role}:repaired"] += 1
                    logger.info("langchain-om %s reply from %s repaired: %s", role, result.model_name,
                                "; ".join(getattr(parsed, "warnings", [])))
                return _with_refused(result, refused, errors), parsed
        else:
            problem = DegenerateReply(reason)
            REPLY_TALLY[f"{role}:degenerate"] += 1
        REPLY_TALLY[f"{role}:refused"] += 1
        errors.append((result.model_name, attempt + 1, problem))
        refused.append(result)
        FAILURE_LOG.report(role, result.model_name, problem, "transient")
    last = errors[-1][2]
    raise (DegenerateReplyError if isinstance(last, DegenerateReply) else RefusedReplyError)(role, errors)


def _counted_usage(count_tokens: Callable[[str], int], prompt: str, reply: str) -> dict[str, Any]:
    """OM's own count, for a model that reported none (marked, so it is not read as the provider's)."""
    tokens_in, tokens_out = count_tokens(prompt), count_tokens(reply)
    return {"input_tokens": tokens_in, "output_tokens": tokens_out, "total_tokens": tokens_in + tokens_out,
            "om_counted": True}


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
