"""Extracted values JSON cannot hold never block a commit (issue 15, item 7).

A value an extractor (or its ``on_extracted`` hook) produces is checked where it is produced:
one JSON cannot hold is an extraction failure naming the slug, and the observation commits.
"""

from __future__ import annotations

from typing import Any

import pytest
from om_recording import RecordingModel, observer_reply
from test_extractors import end_event, make_om, observe_once

from langchain_om.extensions.extractors import Extractor
from langchain_om.store.base import OMStore


class Opaque:
    """A custom object with no JSON form."""


BAD_VALUES: dict[str, Any] = {
    "custom-object": Opaque(),
    "bytes": b"\xff\x00 raw",
    "lone-surrogate-key": {"\ud800": 1},
    "lone-surrogate-text": "broken \udfff text",
    "nested-object": {"ok": [1, 2, {"deep": Opaque()}]},
    "nan": float("nan"),
    "set": {1, 2},
}


@pytest.mark.parametrize("case", sorted(BAD_VALUES))
async def test_a_value_json_cannot_hold_is_a_failure_and_the_observation_commits(
    store: OMStore, case: str
) -> None:
    bad = BAD_VALUES[case]
    model = RecordingModel(fn=lambda _m: observer_reply("<mood>calm</mood><budget>300</budget>"))
    om = make_om(model, store=store, observation={"extract": [
        Extractor("Mood", "mood"),
        Extractor("Budget", "budget", on_extracted=lambda ctx: bad),
    ]})
    contexts = await observe_once(om)
    end = end_event(contexts)
    failures = end.data.extraction_failures  # type: ignore[attr-defined]
    assert [f.slug for f in failures] == ["budget"]
    assert "JSON" in failures[0].error
    assert end.data.extracted_values == {  # type: ignore[attr-defined]
        "current-task": "Pick cat food.", "suggested-response": "Ask about wet or dry food.", "mood": "calm"}
    record = await om.aget_record("t1")
    assert record.groups, "the observation committed"
    assert record.metadata["om"]["extracted"]["mood"] == "calm"
    assert "budget" not in record.metadata["om"]["extracted"]
    # and the thread keeps working: the next steps commit too
    for history in _more_turns():
        await om.aprocess("t1", history)
    assert (await om.aget_record("t1")).version >= record.version


async def test_a_bad_value_in_background_buffering_is_a_failure_and_the_chunk_is_staged(store: OMStore) -> None:
    model = RecordingModel(fn=lambda _m: observer_reply("<budget>300</budget>"))
    om = make_om(model, store=store, observation={
        "buffer_tokens": 100, "message_tokens": 400,
        "extract": [Extractor("Budget", "budget", on_extracted=lambda ctx: Opaque())],
    })
    buffered = None
    for history in _more_turns(12):
        context = await om.aprocess("t1", history)
        await om.await_background()
        buffered = next((e for e in context.events if e.type == "data-om-buffering-end"), None)
        if buffered is not None:
            break
    assert buffered is not None, "a buffering cycle ended"
    assert [f.slug for f in buffered.data.extraction_failures] == ["budget"]  # type: ignore[attr-defined]
    record = await om.aget_record("t1")
    assert record.buffered_chunks or record.groups, "the buffered observation was kept"


def _more_turns(turns: int = 16) -> list[Any]:
    from om_fakes import conversation

    return list(conversation(turns))


async def test_lone_surrogates_in_the_observer_reply_never_block_the_commit(store: OMStore) -> None:
    reply = observer_reply("<mood>calm \udfff</mood>", task="Pick cat food \ud800 now.").replace(
        "Miso", "Mi\udc00so")
    om = make_om(RecordingModel(fn=lambda _m: reply), store=store,
                 observation={"extract": [Extractor("Mood", "mood")]})
    contexts = await observe_once(om)
    assert not end_event(contexts).data.extraction_failures  # type: ignore[attr-defined]
    record = await om.aget_record("t1")
    assert "Mi\ufffdso" in record.groups[0].text
    assert record.current_task == "Pick cat food \ufffd now."
    assert record.metadata["om"]["extracted"]["mood"] == "calm \ufffd"
