"""Issue 30, item 3: after time travel, recall's search follows the checkpoint as paging does.

A run from an earlier checkpoint forks a branch; the turns after that checkpoint are the
abandoned future. Search from the fork must find the fork's history (the parent's rows up to
the fork, then its own) as the current thread, and must never present the abandoned future as
the current thread's. English and Japanese.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from langchain_core.messages import HumanMessage
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.memory import InMemorySaver
from test_checkpoint_branches import KINDS, branch_of, build, cfg, make_om

from langchain_om.extensions.recall import RecallInput
from langchain_om.store import OMStore

FILLER = " and I keep telling you details so the window fills up" * 6
TURNS = [
    "My locker number is 5512, ロッカー番号は 五五一二 です" + FILLER,
    "I like hiking in the Alps" + FILLER,
    "My door code is 7731, 玄関の暗証番号は 七七三一 です",
    "My favourite dish is ramen",
]


def blocks(results: str) -> dict[str, list[str]]:
    """Search results by thread block: the block's header -> the cursors listed under it."""
    out: dict[str, list[str]] = {}
    for block in results.split("\n\n"):
        lines = block.split("\n")
        out[lines[0]] = re.findall(r"cursor: (\S+)", block)
    return out


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("scope", ["resource", "thread"])
async def test_search_on_a_fork_never_returns_the_abandoned_future_as_current(
    kind: str, scope: str, store: OMStore,
) -> None:
    om = make_om(store, retrieval={"scope": scope})
    h = build(kind, om, InMemorySaver())
    thread = f"t-search-{kind}-{scope}"
    finals: list[RunnableConfig] = []
    for text in TURNS:
        await h.graph.ainvoke({"messages": [HumanMessage(text)]}, cfg(thread))
        finals.append((await h.graph.aget_state(cfg(thread))).config)
    # back to the end of turn 2, before the door code was ever said, and on from there
    await h.graph.ainvoke({"messages": [HumanMessage("Where should I go hiking next? 次はどこ?")]}, finals[1])
    fork = await branch_of(h, {"configurable": {"thread_id": thread}})
    parent = await om.aget_record(thread, resource_id="u")
    assert parent.last_observed_seq.get(thread, 0) >= 2, "the shared history is partly observed (not copied)"
    tool = om.recall_tool()
    run_config: RunnableConfig = {"configurable": {"thread_id": thread}}

    async def search(query: str) -> dict[str, Any]:
        return dict(await tool.arecall(RecallInput(mode="search", query=query), run_config))

    # paging and search agree on what the current thread holds
    page = str(await tool.arecall(RecallInput(mode="messages", anchor="start", limit=50), run_config))
    # the door code by its words: a bare "7731" can also occur inside a random message id
    assert "5512" in page and "code is 7731" not in page and "七七三一" not in page and "次はどこ" in page
    for query in ("5512", "五五一二", "hiking", "次はどこ"):
        found = blocks((await search(query))["results"])
        # one block, the current thread's: the history the fork shares is not a second, other thread
        assert len(found) == 1, (query, found)
        header, cursors = next(iter(found.items()))
        assert header.endswith("← current") and f"(id: {fork})" in header, (query, found)
        assert len(cursors) == len(set(cursors)), (query, found)
    # the user's own words of turn 1 (observed before the fork, so read from the parent) included
    for query in ("5512", "五五一二"):
        results = (await search(query))["results"]
        assert re.search(r"user · [^\n]*UTC: My locker number is 5512", results), (query, results)
    for query in ("7731", "七七三一", "ramen"):
        # the turns after the checkpoint never happened on this branch: not the current thread's,
        # and not another thread's either (the user has no other conversation)
        result = await search(query)
        assert result["count"] == 0 and "code is 7731" not in result["results"], f"{query}: {result}"
    # paging by id still reaches the other branch, as documented
    await h.graph.ainvoke({"messages": [HumanMessage("back on the first branch")]}, finals[3])
    for query in ("7731", "七七三一"):
        found = blocks((await search(query))["results"])
        assert list(found) == [f"Thread (untitled) (id: {thread}) ← current"], (query, found)
    assert (await search("次はどこ"))["count"] == 0, "and now the fork is the other branch"
    await om.aclose()
