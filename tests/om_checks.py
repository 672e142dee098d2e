"""Invariants a record and its messages must satisfy after any crash or race."""

from __future__ import annotations

from itertools import pairwise

from langchain_om.store.base import OMStore


async def assert_consistent(store: OMStore, resource_id: str, thread_id: str, *, expected_messages: int) -> None:
    """Every message stored exactly once, observed marks agree with the record, no overlap."""
    stored = await store.aget_messages(resource_id, thread_id)
    ids = [m.id for m in stored]
    assert len(ids) == len(set(ids)) == expected_messages, "every message is stored exactly once"
    assert [m.seq for m in stored] == list(range(1, len(stored) + 1)), "seq has no gaps or repeats"
    record = await store.aget_record(resource_id, thread_id)
    if record is None:
        assert not any(m.observed for m in stored)
        return
    last = record.last_observed_seq.get(thread_id, 0)
    for message in stored:
        assert message.observed == (message.seq <= last), f"observed mark of seq {message.seq} disagrees (last={last})"
    seq_of = {m.id: m.seq for m in stored}
    spans = sorted((seq_of[g.start_id], seq_of[g.end_id]) for g in record.groups if g.source != "reflection")
    for (_, end), (start, _) in pairwise(spans):
        assert start > end, f"two observation groups cover the same messages: {spans}"
    if spans:
        assert spans[-1][1] == last, "the newest group ends where observation stopped"
    for chunk in record.buffered_chunks:
        assert chunk.start_seq > last, "a staged chunk never covers observed messages"
