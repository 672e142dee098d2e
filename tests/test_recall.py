"""The recall tool: every parameter and return field, binding, instructions, pointers, search."""

from __future__ import annotations

import json
import re
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from langchain_core.embeddings import DeterministicFakeEmbedding
from langchain_core.messages import ToolMessage
from langchain_core.tools import BaseTool
from langchain_core.vectorstores import InMemoryVectorStore
from langchain_tests.unit_tests import ToolsUnitTests
from recall_helpers import T0, chat, make_om, result_dict, seed, tool_exchange

from langchain_om.engine import ObservationalMemory
from langchain_om.extensions.recall import RRF_K, RecallInput, RecallTool, install_retrieval, retrieval_instructions
from langchain_om.extensions.vector_index import embedding_space
from langchain_om.foundation.config import OMConfigError, RetrievalConfig
from langchain_om.foundation.context import OM_CONTEXT_MESSAGE_ID
from langchain_om.store import InMemoryStore
from langchain_om.testing import ScriptedObserverModel


class TestRecallToolStandard(ToolsUnitTests):
    """LangChain's standard tool checks (construction, name, schema vs. example arguments)."""

    @property
    def tool_constructor(self) -> type[BaseTool]:
        return RecallTool

    @property
    def tool_constructor_params(self) -> dict[str, Any]:
        om = ObservationalMemory(InMemoryStore(), model=ScriptedObserverModel(), retrieval=True)
        return {"memory": om, "bound_thread_id": "t1"}

    @property
    def tool_invoke_params_example(self) -> dict[str, Any]:
        return {"mode": "messages", "cursor": "m1", "page": -1, "limit": 5, "detail": "high"}


@pytest.fixture
async def om() -> ObservationalMemory:
    memory = make_om(InMemoryStore(), scope="resource")
    await seed(memory, "u1", {
        "t1": chat("t1", 30),
        "t2": [*chat("t2", 2), *tool_exchange("t2x", T0 + timedelta(minutes=5))],
    })
    return memory


def ids(result: dict[str, Any]) -> list[str]:
    return re.findall(r"--- message (\S+) ·", result["messages"])


async def test_schema_has_every_reference_parameter() -> None:
    expected = {"mode", "query", "cursor", "thread_id", "anchor", "page", "limit", "detail", "part_type",
                "tool_name", "part_index", "before", "after"}
    assert set(RecallInput.model_json_schema()["properties"]) == expected


async def test_cursor_forward_backward_and_page_flags(om: ObservationalMemory) -> None:
    tool = om.recall_tool(thread_id="t1", resource_id="u1")
    first = result_dict(await tool.ainvoke({"cursor": "t1-h5", "limit": 4}))
    assert ids(first) == ["t1-h5", "t1-a5", "t1-h6", "t1-a6"]
    assert first["count"] == 4 and first["cursor"] == "t1-h5" and first["page"] == 1 and first["limit"] == 4
    assert first["has_next_page"] and first["has_prev_page"] and first["detail"] == "low"
    assert "truncated" not in first
    second = result_dict(await tool.ainvoke({"cursor": "t1-h5", "limit": 4, "page": 2}))
    assert ids(second) == ["t1-h7", "t1-a7", "t1-h8", "t1-a8"]
    back = result_dict(await tool.ainvoke({"cursor": "t1-h5", "limit": 4, "page": -1}))
    assert ids(back) == ["t1-a3", "t1-h4", "t1-a4", "t1-h5"]
    back2 = result_dict(await tool.ainvoke({"cursor": "t1-h5", "limit": 4, "page": -2}))
    assert ids(back2) == ["t1-a1", "t1-h2", "t1-a2", "t1-h3"]
    zero = result_dict(await tool.ainvoke({"cursor": "t1-h5", "limit": 4, "page": 0}))
    assert ids(zero) == ids(first) and zero["page"] == 1
    start = result_dict(await tool.ainvoke({"cursor": "t1-h0", "limit": 3, "page": -1}))
    assert ids(start) == ["t1-h0"] and not start["has_prev_page"]


async def test_anchor_start_end_without_cursor(om: ObservationalMemory) -> None:
    tool = om.recall_tool(thread_id="t1", resource_id="u1")
    start = result_dict(await tool.ainvoke({"limit": 2}))
    assert ids(start) == ["t1-h0", "t1-a0"] and not start["has_prev_page"] and start["has_next_page"]
    end = result_dict(await tool.ainvoke({"anchor": "end", "limit": 2}))
    assert ids(end) == ["t1-h29", "t1-a29"] and end["has_prev_page"] and not end["has_next_page"]
    end2 = result_dict(await tool.ainvoke({"anchor": "end", "limit": 2, "page": 2}))
    assert ids(end2) == ["t1-h28", "t1-a28"]
    beyond = result_dict(await tool.ainvoke({"limit": 20, "page": 50}))
    assert beyond["count"] == 0 and not beyond["has_next_page"] and beyond["has_prev_page"]


async def test_negative_pages_without_cursor_count_back_from_the_newest(om: ObservationalMemory) -> None:
    tool = om.recall_tool(thread_id="t1", resource_id="u1")
    last = result_dict(await tool.ainvoke({"limit": 2, "page": -1}))
    assert ids(last) == ["t1-h29", "t1-a29"] and last["page"] == -1
    assert last["has_prev_page"] and not last["has_next_page"]
    older = result_dict(await tool.ainvoke({"limit": 2, "page": -2}))
    assert ids(older) == ["t1-h28", "t1-a28"] and older["has_prev_page"] and older["has_next_page"]
    for page in (-1, -2, -5):
        from_end = result_dict(await tool.ainvoke({"anchor": "end", "limit": 2, "page": page}))
        assert ids(from_end) == ids(result_dict(await tool.ainvoke({"limit": 2, "page": page})))
        assert ids(from_end) == ids(result_dict(await tool.ainvoke({"anchor": "end", "limit": 2, "page": -page})))
    oldest = result_dict(await tool.ainvoke({"limit": 7, "page": -9}))  # 60 messages: a short page at the start
    assert ids(oldest) == ["t1-h0", "t1-a0", "t1-h1", "t1-a1"]
    assert not oldest["has_prev_page"] and oldest["has_next_page"]
    before_start = result_dict(await tool.ainvoke({"limit": 7, "page": -10}))
    assert before_start["count"] == 0 and not before_start["has_prev_page"] and before_start["has_next_page"]
    walked: list[list[str]] = []
    page = -1
    while True:
        out = result_dict(await tool.ainvoke({"limit": 7, "page": page}))
        walked.append(ids(out))
        if not out["has_prev_page"]:
            break
        page -= 1
    assert len(walked) == 9
    assert [i for chunk in reversed(walked) for i in chunk] == [f"t1-{r}{i}" for i in range(30) for r in "ha"]


async def test_limit_default_and_cap(om: ObservationalMemory) -> None:
    tool = om.recall_tool(thread_id="t1", resource_id="u1")
    default = result_dict(await tool.ainvoke({}))
    assert default["limit"] == 20
    capped = result_dict(await tool.ainvoke({"limit": 5000}))
    assert capped["limit"] == 100


async def test_detail_levels_parts_and_filters(om: ObservationalMemory) -> None:
    tool = om.recall_tool(thread_id="t2", resource_id="u1")
    low = result_dict(await tool.ainvoke({"cursor": "t2x-ai-call", "limit": 2}))
    text = low["messages"]
    assert "[p0] reasoning (" in text and "[p1] Let me check the forecast." in text
    assert "[p2] tool-call get_weather" in text and "Lisbon" not in text.split("t2x-tool")[0]
    assert "tool-result get_weather: Forecast Lisbon" in text
    high = result_dict(await tool.ainvoke({"cursor": "t2x-ai-call", "limit": 1, "detail": "high"}))
    assert "I should look the weather up." in high["messages"]
    assert high["next_call"] == {"cursor": "t2x-ai-call", "part_index": 1} and "part_index=1" in high["hint"]
    call = result_dict(await tool.ainvoke({"cursor": "t2x-ai-call", "part_index": 2}))
    assert '"city": "Lisbon"' in call["messages"] and '"days": 3' in call["messages"]
    assert call["part_index"] == 2 and call["detail"] == "high"
    only_calls = result_dict(await tool.ainvoke({"thread_id": "current", "part_type": "tool-call"}))
    assert ids(only_calls) == ["t2x-ai-call"]
    by_tool = result_dict(await tool.ainvoke({"tool_name": "get_weather"}))
    assert ids(by_tool) == ["t2x-ai-call", "t2x-tool"]
    none = result_dict(await tool.ainvoke({"tool_name": "no_such_tool"}))
    assert none["count"] == 0
    bad_part = await tool.ainvoke({"cursor": "t2x-ai-call", "part_index": 9})
    assert isinstance(bad_part, str) and "part_index" in bad_part and "3 part(s)" in bad_part


async def test_high_detail_shows_one_part_per_call_with_a_continuation(om: ObservationalMemory) -> None:
    tool = om.recall_tool(thread_id="t2", resource_id="u1")
    first = result_dict(await tool.ainvoke({"cursor": "t2x-q", "limit": 4, "detail": "high"}))
    assert ids(first) == ["t2x-q"] and first["count"] == 1 and first["detail"] == "high"
    assert first["part_index"] == 0 and first["part_count"] == 1 and first["message_id"] == "t2x-q"
    assert "Let me check" not in first["messages"] and "[p1]" not in first["messages"]
    assert first["next_call"] == {"cursor": "t2x-ai-call", "part_index": 0}
    assert 'cursor="t2x-ai-call"' in first["hint"] and "part_index=0" in first["hint"]
    assert first["has_prev_page"] and not first["has_next_page"]  # the page flags still describe the page
    seen: list[tuple[str, int]] = [("t2x-q", 0)]
    texts: list[str] = []
    step = first["next_call"]
    while step is not None:
        out = result_dict(await tool.ainvoke(step))
        assert len(ids(out)) == 1 and out["count"] == 1
        seen.append((out["message_id"], out["part_index"]))
        texts.append(out["messages"])
        step = out["next_call"]
        assert out["has_next_page"] == (step is not None)
    assert seen == [("t2x-q", 0), ("t2x-ai-call", 0), ("t2x-ai-call", 1), ("t2x-ai-call", 2), ("t2x-tool", 0),
                    ("t2x-final", 0)]
    assert "I should look the weather up." in texts[0] and '"city": "Lisbon"' in texts[2]
    assert texts[3].count("sunny 24C") == 60  # the whole tool result, not the low-detail preview
    assert "last part" in out["hint"]
    start = result_dict(await tool.ainvoke({"detail": "high", "limit": 3}))
    assert ids(start) == ["t2-h0"] and start["next_call"] == {"cursor": "t2-a0", "part_index": 0}
    assert start["has_next_page"] and not start["has_prev_page"]
    paged = result_dict(await tool.ainvoke({"detail": "high", "limit": 2, "page": 2}))
    assert ids(paged) == ["t2-h1"] and paged["next_call"] == {"cursor": "t2-a1", "part_index": 0}
    end = result_dict(await tool.ainvoke({"detail": "high", "anchor": "end", "limit": 2}))
    assert ids(end) == ["t2x-tool"] and end["next_call"] == {"cursor": "t2x-final", "part_index": 0}
    crossing = result_dict(await tool.ainvoke({"cursor": "t2-a1", "limit": 1, "detail": "high"}))
    assert ids(crossing) == ["t2-a1"] and crossing["next_call"] == {"cursor": "t2x-q", "part_index": 0}
    calls = result_dict(await tool.ainvoke({"detail": "high", "part_type": "tool-call"}))
    assert ids(calls) == ["t2x-ai-call"] and calls["part_index"] == 2 and '"days": 3' in calls["messages"]
    assert calls["next_call"] is None
    by_tool = result_dict(await tool.ainvoke({"detail": "high", "tool_name": "get_weather"}))
    assert by_tool["part_index"] == 2
    assert by_tool["next_call"] == {"cursor": "t2x-tool", "part_index": 0, "tool_name": "get_weather"}
    nothing = result_dict(await tool.ainvoke({"detail": "high", "tool_name": "no_such_tool"}))
    assert nothing["count"] == 0 and nothing["next_call"] is None


async def test_token_budget_truncates_with_offset(om: ObservationalMemory) -> None:
    tool = om.recall_tool(thread_id="t2", resource_id="u1")
    small = RecallTool(memory=om, bound_thread_id="t2", bound_resource_id="u1", max_output_tokens=120)
    full = result_dict(await tool.ainvoke({"cursor": "t2x-tool", "part_index": 0}))
    assert "truncated" not in full
    cut = result_dict(await small.ainvoke({"cursor": "t2x-tool", "part_index": 0}))
    assert cut["truncated"] is True and cut["token_offset"] > 0
    assert om.counter.count_text(cut["messages"]) <= 120 + 10
    assert len(cut["messages"]) < len(full["messages"])
    paged = result_dict(await small.ainvoke({"limit": 50}))
    assert paged["truncated"] is True and 0 < paged["count"] < 8 and "hint" in paged


async def test_threads_mode(om: ObservationalMemory) -> None:
    tool = om.recall_tool(thread_id="t2", resource_id="u1")
    listed = result_dict(await tool.ainvoke({"mode": "threads"}))
    assert listed["count"] == 2 and listed["page"] == 0 and listed["has_more"] is False
    lines = listed["threads"].splitlines()
    assert any("(id: t2)" in line and line.endswith("← current") for line in lines)
    assert any("(id: t1)" in line and "← current" not in line for line in lines)
    first = result_dict(await tool.ainvoke({"mode": "threads", "limit": 1}))
    assert first["count"] == 1 and first["has_more"] is True
    second = result_dict(await tool.ainvoke({"mode": "threads", "limit": 1, "page": 1}))
    assert second["count"] == 1 and second["has_more"] is False and second["threads"] != first["threads"]
    now = datetime.now(timezone.utc)
    recent = result_dict(await tool.ainvoke({"mode": "threads", "after": (now - timedelta(days=1)).date().isoformat()}))
    assert recent["count"] == 2
    old = result_dict(await tool.ainvoke({"mode": "threads", "before": "2020-01-01"}))
    assert old["count"] == 0
    bad = await tool.ainvoke({"mode": "threads", "before": "next tuesday"})
    assert isinstance(bad, str) and "before" in bad and "ISO 8601" in bad


async def test_reads_other_thread_and_obscured_label(om: ObservationalMemory) -> None:
    tool = om.recall_tool(thread_id="t2", resource_id="u1")
    other = result_dict(await tool.ainvoke({"thread_id": "t1", "limit": 2}))
    assert ids(other) == ["t1-h0", "t1-a0"] and other["thread_id"] == "t1"
    label = om.thread_label("t1")
    assert label != "t1"
    via_label = result_dict(await tool.ainvoke({"thread_id": label, "limit": 2}))
    assert ids(via_label) == ["t1-h0", "t1-a0"]
    mismatch = await tool.ainvoke({"thread_id": "t2", "cursor": "t1-h3"})
    assert isinstance(mismatch, str) and "not in thread" in mismatch


async def test_config_binding_and_tool_message_errors(om: ObservationalMemory) -> None:
    tool = om.recall_tool()
    cfg: Any = {"configurable": {"thread_id": "t1", "resource_id": "u1"}}
    result = result_dict(await tool.ainvoke({"limit": 1}, config=cfg))
    assert ids(result) == ["t1-h0"]
    cfg2: Any = {"configurable": {"thread_id": "t2", "user_id": "u1"}}
    result2 = result_dict(await tool.ainvoke({"limit": 1}, config=cfg2))
    assert ids(result2) == ["t2-h0"]
    missing = await tool.ainvoke({"limit": 1})
    assert isinstance(missing, str) and "thread" in missing
    message = await tool.ainvoke({"name": "recall", "args": {"limit": -3}, "id": "call-1", "type": "tool_call"},
                                 config=cfg)
    assert isinstance(message, ToolMessage) and message.status == "error" and "limit" in str(message.content)
    ok = await tool.ainvoke({"name": "recall", "args": {"limit": 1}, "id": "call-2", "type": "tool_call"},
                            config=cfg)
    assert isinstance(ok, ToolMessage) and ok.status == "success"
    assert json.loads(str(ok.content))["count"] == 1


def test_sync_invoke() -> None:
    memory = make_om(InMemoryStore())
    memory.process("s1", chat("s1", 3), now=T0 + timedelta(minutes=5))
    tool = memory.recall_tool(thread_id="s1")
    result = result_dict(tool.invoke({"limit": 2, "anchor": "end"}))
    assert ids(result) == ["s1-h2", "s1-a2"]
    memory.close()


async def test_thread_scope_confines_recall() -> None:
    memory = make_om(InMemoryStore(), scope="resource", retrieval={"scope": "thread"})
    await seed(memory, "u1", {"t1": chat("t1", 2), "t2": chat("t2", 2)})
    tool = memory.recall_tool(thread_id="t1", resource_id="u1")
    assert ids(result_dict(await tool.ainvoke({}))) == ["t1-h0", "t1-a0", "t1-h1", "t1-a1"]
    for args in ({"thread_id": "t2"}, {"cursor": "t2-h0"}, {"mode": "threads"}):
        out = await tool.ainvoke(args)
        assert isinstance(out, str) and out.startswith("recall error"), args
        assert "t2 question" not in out


async def test_context_pointers_round_trip_through_recall() -> None:
    memory = make_om(InMemoryStore(), observation={"message_tokens": 300, "buffer_tokens": False})
    history = chat("c", 12)
    context = None
    for end in range(2, len(history) + 1, 2):
        moment = T0 + timedelta(minutes=end)
        context = await memory.aprocess("c", history[:end], now=moment)
    assert context is not None and context.system_message is not None
    assert context.system_message.id == OM_CONTEXT_MESSAGE_ID
    text = str(context.system_message.content)
    ranges = re.findall(r'<observation-group id="[^"]+" range="([^":]+):([^"]+)"', text)
    assert ranges, text
    tool = memory.recall_tool(thread_id="c")
    for start_id, end_id in ranges:
        forward = result_dict(await tool.ainvoke({"cursor": start_id, "limit": 100}))
        got = ids(forward)
        assert got[0] == start_id and end_id in got
        back = result_dict(await tool.ainvoke({"cursor": end_id, "page": -1, "limit": 100}))
        assert ids(back)[-1] == end_id and start_id in ids(back)
    assert "<recall-instructions>" in text


async def test_instructions_by_scope_and_vector() -> None:
    store = InMemoryStore()
    resource = make_om(store, scope="resource", retrieval={"instructions": "Prefer the billing thread."})
    ctx = await resource.aprocess("r1", chat("r1", 1), resource_id="u9", now=T0)
    assert ctx.record.groups == []
    text = str(ctx.system_message.content if ctx.system_message else "")
    assert 'mode="threads"' in text
    # no embedder: search is described as the keyword search it is, never as semantic
    assert 'mode="search"' in text and "containing its words" in text and "similar" not in text
    # the guidance is static: it comes first, and ends with the application's own instruction
    assert text.startswith("<recall-instructions>")
    assert "Prefer the billing thread.\n</recall-instructions>" in text
    assert "look for it with recall first" in text
    vector = make_om(InMemoryStore(), scope="resource", retrieval={
        "vector": True, "vector_store": InMemoryVectorStore(DeterministicFakeEmbedding(size=64))})
    both = retrieval_instructions(vector)
    assert 'mode="search"' in both and 'mode="threads"' in both and "mean something similar" in both
    thread_scoped = make_om(InMemoryStore(), retrieval={"scope": "thread"})
    early = await thread_scoped.aprocess("x", chat("x", 1), now=T0)
    assert early.system_message is None
    instructions = retrieval_instructions(thread_scoped)
    assert 'mode="threads"' not in instructions and "cursor" in instructions
    assert 'mode="search"' in instructions and "in this conversation" in instructions


async def test_no_retrieval_means_no_tool_and_no_instructions() -> None:
    memory = ObservationalMemory(InMemoryStore(), model=ScriptedObserverModel(), scope="resource")
    with pytest.raises(ValueError, match="retrieval"):
        memory.recall_tool()
    ctx = await memory.aprocess("n1", chat("n1", 1), resource_id="u1", now=T0)
    assert ctx.system_message is None


async def test_vector_search_grouped_scoped_and_rechecked() -> None:
    vectors = InMemoryVectorStore(DeterministicFakeEmbedding(size=64))
    memory = make_om(InMemoryStore(), scope="resource", retrieval={"vector": True, "vector_store": vectors})
    await seed(memory, "u1", {"a": chat("a", 3), "b": chat("b", 3)})
    await seed(memory, "u2", {"z": chat("z", 3)})
    target = "b question 1: " + " ".join(f"bw1_{k}" for k in range(12))
    tool = memory.recall_tool(thread_id="a", resource_id="u1")
    found = result_dict(await tool.ainvoke({"mode": "search", "query": target, "limit": 4}))
    assert found["count"] == 4
    text = found["results"]
    first_thread = text.splitlines()[0]
    assert "(id: b)" in first_thread
    assert "cursor: b-h1" in text.split("\n\n")[0].splitlines()[2]
    assert f"[score {2 / (RRF_K + 1):.3f}]" in text  # first by meaning and by words: fused
    assert "z question" not in text and "(id: z)" not in text
    # a document claiming resource u1 but pointing at u2's message is never shown
    from langchain_core.documents import Document

    await vectors.aadd_documents([Document(page_content=target, metadata={
        "resource_id": "u1", "thread_id": "z", "message_id": "z-h1"})], ids=["forged"])
    again = result_dict(await tool.ainvoke({"mode": "search", "query": target, "limit": 50}))
    assert "z-h1" not in again["results"] and "(id: z)" not in again["results"]
    other = memory.recall_tool(thread_id="z", resource_id="u2")
    theirs = result_dict(await other.ainvoke({"mode": "search", "query": target, "limit": 50}))
    assert "(id: b)" not in theirs["results"] and "(id: z)" in theirs["results"]
    empty = await tool.ainvoke({"mode": "search"})
    assert isinstance(empty, str) and "query" in empty


async def test_vector_with_only_embeddings_keeps_vectors_in_the_store() -> None:
    embeddings = DeterministicFakeEmbedding(size=64)
    store = InMemoryStore()
    memory = make_om(store, scope="resource", retrieval=RetrievalConfig(vector=True, embeddings=embeddings))
    assert memory.config.retrieval is not None and memory.config.retrieval.vector_store is None
    await seed(memory, "u1", {"a": chat("a", 2), "b": chat("b", 2)})
    assert len(await store.aget_vectors("u1", embedding_space(embeddings))) == 8  # every message, in the store
    target = "b question 1: " + " ".join(f"bw1_{k}" for k in range(12))
    found = result_dict(await memory.recall_tool(thread_id="a", resource_id="u1").ainvoke(
        {"mode": "search", "query": target, "limit": 2}))
    assert found["count"] == 2
    assert re.findall(r"cursor: (\S+)", found["results"])[0] == "b-h1"  # exact text: first by both rankings
    assert 'mode="search"' in retrieval_instructions(memory)
    bad = make_om(InMemoryStore())
    bad.config.retrieval = RetrievalConfig.model_construct(vector=True, embeddings="ada-002")
    with pytest.raises(OMConfigError, match=r"retrieval\.embeddings"):
        install_retrieval(bad)


async def test_vector_dict_with_only_embeddings() -> None:
    memory = make_om(InMemoryStore(), retrieval={"vector": True, "embeddings": DeterministicFakeEmbedding(size=32)})
    assert memory.config.retrieval is not None and memory.config.retrieval.vector_store is None
    assert "mean something similar" in retrieval_instructions(memory)


async def test_search_works_without_embeddings(om: ObservationalMemory) -> None:
    tool = om.recall_tool(thread_id="t1", resource_id="u1")
    out = result_dict(await tool.ainvoke({"mode": "search", "query": "weather Lisbon"}))
    assert "cursor: t2x-q" in out["results"] and out["count"] >= 1
