"""The context the agent's model reads: the caller's instructions, OM's system message (the
observation log, continuation hints, extension sections) and the unobserved messages, with the
newest human message pinned back in when an observation took it."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import date, datetime
from typing import Any

from langchain_core.messages import BaseMessage

from ..foundation.clock import conversation_today
from ..foundation.context import context_message, render_context, render_log
from ..foundation.events import OmittedLog, StatusData
from ..foundation.inputs import Instructions, is_edit_message
from ..foundation.window import Window
from ..store.base import ObservationGroup, OMRecord, StoredMessage, record_key
from .core import EngineCore
from .log_fit import Omission, fit_log, omission_line, shown_notes
from .state import OMContext, lru_put


async def abuild_context(core: EngineCore, record: OMRecord, window: Window, resource_id: str, thread_id: str,
                         status: StatusData, *, now: datetime | None = None) -> OMContext:
    """The context for the agent's model; ``now`` is the step's clock (used only when no message
    in the context carries its own timestamp). Today's date is taken on the conversation's clock
    (``foundation.clock``), the one the transcript dated the log's headers on."""
    static: list[str] = []
    for provider in core.static_section_providers:
        section = await provider(core, record, resource_id, thread_id)
        if section:
            static.append(section)
    sections: list[str] = []
    for provider in core.section_providers:
        section = await provider(core, record, resource_id, thread_id)
        if section:
            sections.append(section)
    messages = core.window_messages(resource_id, thread_id, window)
    if window.has_edits:  # corrections are for the Observer, not the model
        messages = [m for m in messages if not is_edit_message(m)]
    if not any(m.type == "human" for m in messages):
        pinned = await _pinned_message(core, record, resource_id, thread_id)
        if pinned is not None:
            messages.insert(0, core.message_of(resource_id, pinned))
    today = conversation_today(messages, now or core._clock())
    text, omission = render(core, record, sections, static, today)
    status.omitted = _omitted_log(core, omission)  # what this context leaves out of the log (log_fit.py)
    system = context_message(text) if text else None
    instructions, _tokens = instructions_of(core, record, thread_id)
    return OMContext(system_message=system, messages=messages, status=status, events=[], source_record=record,
                     instructions=list(instructions))


async def _pinned_message(core: EngineCore, record: OMRecord, resource_id: str, thread_id: str) -> StoredMessage | None:
    """The newest human message of the thread when an observation took it (looked up by thread
    and seq: a forked conversation may hold the same id in another thread of the resource)."""
    pinned = record.metadata.get("pinned")
    if isinstance(pinned, dict):
        entry = pinned.get(thread_id)
        if not (isinstance(entry, list) and len(entry) == 2 and isinstance(entry[1], int)):
            return None
        rows = await core.store.aget_messages(resource_id, thread_id, after_seq=entry[1] - 1,
                                              before_seq=entry[1] + 1)
        return rows[0] if rows and rows[0].id == entry[0] else None
    legacy = record.metadata.get("pinned_message_id")  # records written before pins carried a seq
    if isinstance(legacy, str):
        row = await core.store.aget_message(resource_id, legacy)
        if row is not None and row.thread_id == thread_id:
            return row
    return None


def instructions_of(core: EngineCore, record: OMRecord, thread_id: str) -> tuple[list[BaseMessage], int]:
    """The caller's system messages for the thread and their tokens (parsed once per change)."""
    entry = Instructions.stored(record.metadata, thread_id)
    if entry is None:
        return [], 0
    stamp = tuple(entry.get("fingerprints") or ())
    key = record_key(record.resource_id, thread_id)
    cached = core._instruction_cache.get(key)
    if cached is not None and cached[0] == stamp:
        return cached[1], cached[2]
    messages = Instructions.load(record.metadata, thread_id)
    tokens = sum(core.counter.count_message(m) for m in messages)
    lru_put(core._instruction_cache, key, (stamp, messages, tokens), core.cache_limit)
    return messages, tokens


def render(core: EngineCore, record: OMRecord, sections: list[str], static: Sequence[str] = (),
           today: date | None = None) -> tuple[str | None, Omission | None]:
    """The system message text and what it left out of the log; rendered again only when what it
    shows changed: the log, the hints, a section or the date. Keyed on that content, not on the
    record's version, which moves on every buffered chunk, while rendering a 20k-token log (its
    dates annotated) takes ~1 ms."""
    stamp = (record.id, _groups_stamp(record),
             record.current_task, record.suggested_response, tuple(sections), tuple(static), today)
    cached = core._rendered.get(record.key)
    if cached is not None and cached[0] == stamp:
        return cached[1], cached[2]
    labels = {g.thread_id: core.thread_label(g.thread_id) for g in record.groups}
    shown, line, omission, block = fit_shown_log(core, record, labels, today)
    text = render_context(
        shown, current_task=record.current_task, suggested_response=record.suggested_response,
        extra_sections=sections, static_sections=static, thread_labels=labels,
        show_thread=core.config.scope == "resource", today=today, omitted=line, log_block=block,
    )
    core.keep_for_record(core._rendered, record.key, (stamp, text, omission))
    return text, omission


def fit_shown_log(core: EngineCore, record: OMRecord, labels: dict[str, str], today: date | None
                  ) -> tuple[list[ObservationGroup], str | None, Omission | None, str | None]:
    """The log within ``reflection.block_after``, measured as the agent's model reads it (its notes
    with their dates annotated, and the omission line; the group tags are framing, as the reading
    rules are, and count toward neither), and that rendered block (None when there is no log)."""
    show_thread = core.config.scope == "resource"
    count = getattr(core.counter, "count_piece", core.counter.count_text)
    blocks: dict[tuple[tuple[int, ...], str | None], str] = {}  # every block measured, by groups and line

    def measure(groups: Sequence[ObservationGroup], line: str | None) -> int:
        block = render_log(groups, thread_labels=labels, show_thread=show_thread, today=today, omitted=line)
        blocks[tuple(map(id, groups)), line] = block
        return int(core.counter.count_text(shown_notes(block)))

    recall = core.config.retrieval is not None
    shown, line, omission = fit_log(record.groups, core.config.reflection.block_after_tokens(), measure,
                                    lambda omission: omission_line(omission, recall=recall),
                                    lambda groups: sum(int(count(g.text)) for g in groups))
    return shown, line, omission, blocks.get((tuple(map(id, shown)), line))


def omitted_of(core: EngineCore, record: OMRecord) -> OmittedLog | None:
    """What the record's last rendered context left out of its log (None: all of it is shown, or
    the log changed since: the status of a record read without building its context)."""
    cached = core._rendered.get(record.key)
    if cached is None or cached[0][1] != _groups_stamp(record):
        return None
    return _omitted_log(core, cached[2])


def _omitted_log(core: EngineCore, omission: Omission | None) -> OmittedLog | None:
    if omission is None:
        return None
    return OmittedLog(first_date=omission.first_date, last_date=omission.last_date, partial=omission.partial,
                      notes=omission.notes, tokens=omission.tokens, shown_tokens=omission.shown_tokens,
                      limit=core.config.reflection.block_after_tokens())


def _groups_stamp(record: OMRecord) -> tuple[Any, ...]:
    return tuple((g.id, g.start_id, g.end_id, g.thread_id, g.text) for g in record.groups)
