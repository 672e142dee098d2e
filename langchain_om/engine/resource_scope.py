"""Resource scope: one observation log shared by every thread of a resource.

When the engine decides to observe (``turn-sync`` or ``manual``), ``observe_resource``
observes the unobserved messages of *all* the resource's threads at once:

* each thread contributes its unobserved messages up to a safe cut (a tool call never leaves
  its results behind); for the current thread on a ``turn-sync`` the engine's rule applies
  (the newest human turn stays visible unless that turn alone is over the limit);
* threads are packed into batches of at most ``observation.max_tokens_per_batch`` tokens; a
  thread stays inside one batch unless it alone exceeds the limit, then it is split at safe cuts;
* batches go to the Observer in parallel (``asyncio.gather``), thread ids replaced by hashed
  labels in the transcript (``obscure_thread_ids`` is on in resource scope);
* one record commit (compare-and-swap) adds the groups and marks every thread observed; on a
  conflict the record is reloaded and only what is still unobserved is redone.

Trigger (documented choice): the threshold counts the **current thread's** unobserved tokens,
not the whole resource's. The threshold exists to bound the context of the conversation the
agent is in; the agent's context only ever holds the current thread's unobserved messages, so
leftovers of an idle thread must not make another conversation pay for an observation. Once an
observation runs, it sweeps every thread, so nothing stays unobserved for long.

Groups: a batch holding one thread (or one slice of a thread) becomes one group with that
slice's ``start_id:end_id``. A multi-thread batch gets one group per thread when the Observer's
reply is split by the transcript's ``=== Thread <label> ===`` headers; otherwise one group
carrying the whole reply, pointing at the current thread's (or the first thread's) range and
listing every thread of the batch in ``thread_ids``.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Sequence
from typing import Any

from ..foundation.hooks import Trigger
from ..foundation.turns import other_thread_cut, pin_message, pinned_row, safe_cut_before
from ..foundation.window import Window
from ..model_calls.spend import add_to_record
from ..store.base import ObservationGroup, OMRecord, RecordConflictError, StoredMessage, all_thread_ids, utcnow
from . import planner
from .backlog import Slice, split_thread
from .core import EngineCore
from .model_runs import apply_hints, arun_observer
from .state import CycleResult, StepState
from .titles import aapply_title

_MAX_ATTEMPTS = 5


async def collect_unobserved(
    om: EngineCore, step: StepState, record: OMRecord, *, trigger: Trigger
) -> tuple[list[Slice], StoredMessage | None]:
    """Per-thread slices to observe now (oldest activity first) and the pinned human row, if any.

    Another thread's current turn (its newest human message and any tool round after it) is
    never taken: that thread's next context must start with its own user's message."""
    slices: list[Slice] = []
    pinned: StoredMessage | None = None
    thread_ids = await all_thread_ids(om.store, step.resource_id)
    if step.thread_id not in thread_ids:
        thread_ids.append(step.thread_id)
    for thread_id in thread_ids:
        after = record.last_observed_seq.get(thread_id, 0)
        window = Window(await om.store.aget_messages(step.resource_id, thread_id, after_seq=after))
        if not window:
            continue
        kinds = window.kinds
        if thread_id == step.thread_id and trigger != "manual":
            cut = planner.observation_cut(om.config, kinds, window.token_list)
            pinned = pinned_row(window, kinds, cut)
        elif trigger == "manual":
            cut = safe_cut_before(kinds, len(kinds))
        else:
            cut = other_thread_cut(kinds)
        while cut > 0 and cut < len(window) and window[cut - 1].kind == "temporal-marker":
            cut -= 1  # a time-gap marker stays with the message it introduces
        if cut > 0:
            slices.append(Slice(thread_id, list(window[:cut])))
    slices.sort(key=lambda s: (s.messages[0].created_at, s.thread_id))
    return slices, pinned


def make_batches(slices: Sequence[Slice], limit: int) -> list[list[Slice]]:
    """Pack slices into batches of at most ``limit`` tokens (first fit, in order)."""
    batches: list[list[Slice]] = []
    current: list[Slice] = []
    current_tokens = 0
    for piece in slices:
        if piece.tokens > limit:
            if current:
                batches.append(current)
                current, current_tokens = [], 0
            batches.extend([part] for part in split_thread(piece, limit))
            continue
        if current and current_tokens + piece.tokens > limit:
            batches.append(current)
            current, current_tokens = [], 0
        current.append(piece)
        current_tokens += piece.tokens
    if current:
        batches.append(current)
    return batches


_HEADER = re.compile(r"^\s*=+\s*Thread\s+(\S+?)\s*=+\s*$", re.MULTILINE)


def split_by_thread(text: str, labels: dict[str, str]) -> dict[str, str] | None:
    """Per-thread sections of an Observer reply headed ``=== Thread <label> ===``, if it has them.

    Any text before the first header (typically the ``Date:`` line) is kept at the top of every
    section so each group stays dated. Returns None unless every section maps to a known label."""
    matches = list(_HEADER.finditer(text))
    if not matches:
        return None
    preamble = text[: matches[0].start()].strip()
    by_label = {label: thread for thread, label in labels.items()}
    sections: dict[str, str] = {}
    for index, match in enumerate(matches):
        thread = by_label.get(match.group(1))
        if thread is None:
            return None
        end = matches[index + 1].start() if index + 1 < len(matches) else len(text)
        body = text[match.end(): end].strip()
        if body:
            joined = f"{preamble}\n{body}" if preamble else body
            sections[thread] = f"{sections[thread]}\n{joined}" if thread in sections else joined
    return sections or None


def _groups_for_batch(
    om: EngineCore, record: OMRecord, batch: Sequence[Slice], result: CycleResult, current: str
) -> list[ObservationGroup]:
    def group(piece: Slice, text: str, tokens: int, thread_ids: list[str] | None = None) -> ObservationGroup:
        return ObservationGroup(
            thread_id=piece.thread_id, start_id=piece.messages[0].id, end_id=piece.messages[-1].id, text=text,
            tokens=tokens, generation=record.generation_count, source="observation", thread_ids=thread_ids or [],
        )

    if len(batch) == 1:
        return [group(batch[0], result.text, result.tokens)]
    labels = {piece.thread_id: om.thread_label(piece.thread_id) for piece in batch}
    sections = split_by_thread(result.text, labels)
    if sections is not None and all(piece.thread_id in sections for piece in batch):
        return [group(p, sections[p.thread_id], om.counter.count_text(sections[p.thread_id])) for p in batch]
    anchor = next((p for p in batch if p.thread_id == current), batch[0])
    return [group(anchor, result.text, result.tokens, [p.thread_id for p in batch])]


async def aobserve_resource(
    om: EngineCore, step: StepState, record: OMRecord, *, trigger: Trigger
) -> OMRecord:
    """Observe every thread of the resource in parallel batches; one CAS commit. Returns the record."""
    limit = om.config.observation.max_tokens_per_batch
    for _attempt in range(_MAX_ATTEMPTS):
        slices, pinned = await collect_unobserved(om, step, record, trigger=trigger)
        if not slices:
            return record
        batches = make_batches(slices, limit)
        outcomes = await asyncio.gather(
            *(arun_observer(om, step, record, _batch_dict(batch), trigger=trigger) for batch in batches),
            return_exceptions=True,
        )
        for outcome in outcomes:
            if isinstance(outcome, BaseException):
                raise outcome
        done: list[tuple[list[Slice], Any]] = [(b, o) for b, o in zip(batches, outcomes, strict=True) if o is not None]
        if not done:
            return record
        updated = record.model_copy(deep=True)
        marks: dict[str, int] = {}
        hint_result: Any = None
        for batch, result in done:
            updated.groups.extend(_groups_for_batch(om, record, batch, result, step.thread_id))
            add_to_record(updated.metadata, "observer", result.usage, result.provider_metadata)
            for piece in batch:
                last = piece.messages[-1]
                if last.seq > marks.get(piece.thread_id, 0):
                    marks[piece.thread_id] = last.seq
                    updated.last_observed_seq[piece.thread_id] = last.seq
                    updated.last_observed_id[piece.thread_id] = last.id
                if updated.last_observed_at is None or last.created_at > updated.last_observed_at:
                    updated.last_observed_at = last.created_at
            if hint_result is None or any(p.thread_id == step.thread_id for p in batch):
                hint_result = result
        # a failed batch leaves a gap: never mark a thread past a slice that was not observed
        failed = [b for b, o in zip(batches, outcomes, strict=True) if o is None]
        for batch in failed:
            for piece in batch:
                first = piece.messages[0].seq
                if piece.thread_id in marks and marks[piece.thread_id] >= first:
                    return record  # a later slice succeeded while an earlier one failed; retry next step
        if hint_result is not None:
            apply_hints(om, updated, hint_result.current_task, hint_result.suggested_response, hint_result.extracted)
        if pinned is not None and step.thread_id in marks:
            pin_message(updated.metadata, pinned)
        updated.updated_at = utcnow()
        try:
            committed = await om.store.acommit_record(updated, expected_version=record.version, mark_observed=marks)
        except RecordConflictError:
            record = await om.aload_record(step.resource_id, step.thread_id)
            continue
        if hint_result is not None and any(p.thread_id == step.thread_id for b, _ in done for p in b):
            await aapply_title(om, step, hint_result.thread_title, hint_result.cycle_id)
        return committed
    return record


def _batch_dict(batch: Sequence[Slice]) -> dict[str, list[StoredMessage]]:
    merged: dict[str, list[StoredMessage]] = {}
    for piece in batch:
        merged.setdefault(piece.thread_id, []).extend(piece.messages)
    return merged
