"""Generate the reference tables of docs/configuration.md and docs/events.md from the models.

The configuration table comes from the pydantic config models (``langchain_om.foundation.config``):
every field, its default and its docstring, with the upstream reference page's camelCase name beside
it. The events tables come from the event models (``langchain_om.foundation.events``): every wire
field of every ``data-om-*`` part. Each page keeps its hand-written prose; only the text between
``<!-- generated: NAME -->`` and ``<!-- end generated: NAME -->`` is rewritten.

``python scripts/gen_reference.py`` rewrites the tables; ``--check`` only reports (exit 1) when they
are stale. tests/test_docs.py runs the check.
"""

from __future__ import annotations

import re
import sys
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from langchain_om.foundation import config as cfg  # noqa: E402
from langchain_om.foundation import events as ev  # noqa: E402

OM_ONLY = {"token_counter", "failure_policy", "observation.model_timeout", "reflection.model_timeout",
           "retrieval.vector_store", "retrieval.embeddings", "retrieval.search_limit"}
"""Options of this package with no counterpart on the upstream reference page."""

NESTED = {"observation": cfg.ObservationConfig, "reflection": cfg.ReflectionConfig,
          "retrieval": cfg.RetrievalConfig, "failure_policy": cfg.FailurePolicyConfig,
          "model_settings": cfg.ModelSettings}
"""Fields whose own fields are listed as dotted options instead of as one row."""

CONSTRUCTOR_ROWS = [
    ("store", "storage", "SQLite at `$LANGCHAIN_OM_DB` or `./langchain_om.db`",
     "Any `OMStore`: `SQLiteStore`, `PostgresStore`, `InMemoryStore` or your own (see [Storage](storage.md)). "
     "The first argument of `ObservationalMemory`, not part of `OMConfig`."),
]

COMMON_WIRE = {
    "cycleId": "Id shared by every part of one cycle (start, end or failed, activation); the part's `id`.",
    "operationType": "`observation` or `reflection`.",
    "recordId": "The OM record (one per thread, or per resource in resource scope).",
    "threadId": "The thread the step ran for.",
    "threadIds": "Resource scope: every thread the cycle covers.",
    "startedAt": "ISO 8601 time the cycle started.", "completedAt": "ISO 8601 time the cycle ended.",
    "failedAt": "ISO 8601 time the cycle failed.", "activatedAt": "ISO 8601 time of the activation.",
    "durationMs": "How long the model call(s) took.",
    "observations": "The observation text the cycle produced (or, on failure, what was kept).",
    "error": ("One-line reason of the failure; `skipped: ...` (with the last failure's reason) when a turn"
              " skipped a failing Observer, its start part sent with it."),
    "config": "The thresholds in force.",
    "config.messageTokens": "`observation.message_tokens` in force.",
    "config.observationTokens": "`reflection.observation_tokens` in force.", "config.scope": "`thread` or `resource`.",
    "tokensToObserve": "Message tokens sent to the Observer (or log tokens to the Reflector).",
    "tokensToBuffer": "Tokens the background cycle works on.", "tokensObserved": "Message tokens observed.",
    "tokensBuffered": "Tokens the background cycle took in.", "bufferedTokens": "Tokens of the buffered result.",
    "tokensAttempted": "Tokens the failed call was given.",
    "observationTokens": "Tokens of the observation log after the cycle.",
    "currentTask": "The Observer's note of what the user is doing now.",
    "suggestedResponse": "The Observer's hint for the next reply.",
    "extractedValues": "Values of the configured `Extractor`s, by slug.",
    "extractionFailures": "Extractors that failed, with a one-line error each.",
    "extractionFailures[].slug": "The extractor's slug.", "extractionFailures[].error": "Why it failed.",
    "chunksActivated": "Buffered chunks swapped in.", "tokensActivated": "Message tokens those chunks covered.",
    "messagesActivated": "Messages those chunks covered.", "generationCount": "Reflections so far.",
    "triggeredBy": "`threshold`, `ttl` (idle) or `provider_change`.",
    "lastActivityAt": "Epoch ms of the thread's previous activity (idle activation).",
    "ttlExpiredMs": "How far past the idle TTL the activation came.",
    "previousModel": "The agent's model before the change.", "currentModel": "The agent's model now.",
    "oldTitle": "The title before (none for the first one).", "newTitle": "The new thread title.",
    "timestamp": "ISO 8601 time of the change.",
    "windows": "Both windows.", "windows.active": "What is in the context now.",
    "windows.active.messages.tokens": "Unobserved-message tokens.",
    "windows.active.messages.threshold": "`observation.message_tokens`.",
    "windows.active.observations.tokens": "Observation-log tokens.",
    "windows.active.observations.threshold": "`reflection.observation_tokens`.",
    "windows.buffered": "Work done in the background, waiting for activation.",
    "windows.buffered.observations.chunks": "Buffered chunks.",
    "windows.buffered.observations.messageTokens": "Message tokens they cover.",
    "windows.buffered.observations.projectedMessageRemoval": "Message tokens an activation now would remove.",
    "windows.buffered.observations.observationTokens": "Observation tokens they hold.",
    "windows.buffered.observations.status": "`idle`, `running` or `complete`.",
    "windows.buffered.reflection.inputObservationTokens": "Log tokens the buffered reflection condenses.",
    "windows.buffered.reflection.observationTokens": "Its output's tokens.",
    "windows.buffered.reflection.status": "`idle`, `running` or `complete`.",
    "stepNumber": "The agent loop's step within the current run, from 0.",
    "messageId": "The user message the marker precedes.", "gapMs": "Time since the previous message.",
    "previousAt": "ISO 8601 time of the previous message.", "currentAt": "ISO 8601 time of this message.",
    "text": "The marker's text as the model sees it.",
}


def camel(path: str) -> str:
    return ".".join(re.sub(r"_([a-z])", lambda m: m.group(1).upper(), part) for part in path.split("."))


def _default(field: FieldInfo) -> str:
    if field.default_factory is not None:
        value = field.default_factory()  # type: ignore[call-arg]
        if isinstance(value, BaseModel):
            return "(below)"
        return f"`{value!r}`"
    if field.default is PydanticUndefined:
        return "(required)"
    value = field.default
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, int) and not isinstance(value, bool) and value >= 10_000:
        return f"`{value:_}`"
    return f"`{value!r}`"


def _cell(text: str | None) -> str:
    return " ".join((text or "").split()).replace("|", "\\|")


def config_rows(model: type[BaseModel], prefix: str = "") -> Iterator[tuple[str, str, str, str]]:
    for name, field in model.model_fields.items():
        path = f"{prefix}{name}"
        if not field.description:
            raise SystemExit(f"{model.__name__}.{name}: no docstring; every option is documented on its model")
        top = path.split(".")[0]
        upstream = "-" if path in OM_ONLY or top in OM_ONLY else f"`{camel(path)}`"
        if name in NESTED and name != "retrieval":
            if name == "model_settings":
                yield (f"`{path}`", upstream, "(below)", _cell(field.description))
            yield from config_rows(NESTED[name], f"{path}.")
            continue
        yield (f"`{path}`", upstream, _default(field), _cell(field.description))
        if name == "retrieval":
            yield from config_rows(NESTED[name], f"{path}.")


def config_table() -> str:
    lines = ["| Option | Reference name | Default | Meaning |", "|---|---|---|---|"]
    for row in CONSTRUCTOR_ROWS:
        lines.append(f"| `{row[0]}` | `{row[1]}` | {row[2]} | {row[3]} |")
    lines += [f"| {a} | {b} | {c} | {d} |" for a, b, c, d in config_rows(cfg.OMConfig)]
    return "\n".join(lines)


def _data_model(annotation: Any) -> type[BaseModel] | None:
    for candidate in (annotation, *typing.get_args(annotation)):
        if isinstance(candidate, type) and issubclass(candidate, BaseModel):
            return candidate
        for inner in typing.get_args(candidate):
            if isinstance(inner, type) and issubclass(inner, BaseModel):
                return inner
    return None


def _type(annotation: Any) -> str:
    text = getattr(annotation, "__name__", None) if isinstance(annotation, type) else None
    text = text or str(annotation).replace("typing.", "")
    return re.sub(r"langchain_om\.[\w.]+\.", "", text).replace("NoneType", "None")


def wire_rows(model: type[BaseModel], wire: str = "", python: str = "") -> Iterator[tuple[str, str, str, str]]:
    for name, field in model.model_fields.items():
        alias = field.alias or name
        wire_path, python_path = f"{wire}{alias}", f"{python}{name}"
        inner = _data_model(field.annotation)
        is_list = typing.get_origin(field.annotation) is list or "list[" in str(field.annotation)
        optional = field.default is not PydanticUndefined or field.default_factory is not None
        meaning = field.description or COMMON_WIRE.get(wire_path.replace("[]", "[]"), "")
        if inner is not None:
            if meaning:
                yield (wire_path, python_path, "object" + (" list" if is_list else ""), meaning)
            suffix = "[]." if is_list else "."
            yield from wire_rows(inner, wire_path + suffix, python_path + suffix)
            continue
        yield (wire_path, python_path, _type(field.annotation) + (" (optional)" if optional else ""), meaning)


def events_tables() -> str:
    out: list[str] = []
    for type_name, event_cls in ev.EVENT_TYPES.items():
        data_model = event_cls.model_fields["data"].annotation
        assert isinstance(data_model, type) and issubclass(data_model, BaseModel)
        transient = "yes" if event_cls.transient else "no"
        out += [f"### `{type_name}`", "", f"`{event_cls.__name__}`, data `{data_model.__name__}`; "
                f"transient: {transient}.", "", "| Wire field (`data.`) | Python attribute | Type | Meaning |",
                "|---|---|---|---|"]
        for wire, python, kind, meaning in wire_rows(data_model):
            if not meaning:
                raise SystemExit(f"{type_name}: field {wire} has no meaning: add a docstring or a COMMON_WIRE entry")
            out.append(f"| `{wire}` | `{python}` | `{_cell(kind)}` | {_cell(meaning)} |")
        out.append("")
    return "\n".join(out).rstrip("\n")


PAGES = {"docs/configuration.md": ("config", config_table), "docs/events.md": ("events", events_tables)}


def regenerate(text: str, name: str, body: str) -> str:
    start, end = f"<!-- generated: {name} -->", f"<!-- end generated: {name} -->"
    if start not in text or end not in text:
        raise SystemExit(f"missing the markers {start} ... {end}")
    head, rest = text.split(start, 1)
    _, tail = rest.split(end, 1)
    return f"{head}{start}\n{body}\n{end}{tail}"


def main(argv: list[str]) -> int:
    stale = []
    for page, (name, build) in PAGES.items():
        path = ROOT / page
        text = path.read_text(encoding="utf-8")
        fresh = regenerate(text, name, build())
        if fresh != text:
            stale.append(page)
            if "--check" not in argv:
                path.write_text(fresh, encoding="utf-8")
    if stale and "--check" in argv:
        print(f"stale generated tables in {', '.join(stale)}: run python scripts/gen_reference.py")
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
