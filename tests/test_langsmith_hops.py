"""An untraced ``awrap_model_call`` costs no thread hops (issue 33, item 3: one user's CPU per turn).

``create_agent`` wraps the hook in LangSmith's ``traceable``, which runs its set-up and tear-down
through ``run_in_executor`` on every model call, tracing or not. With ``inline_untraced_hooks``
(default) they run on the loop when nothing is traced; a traced run still goes through LangSmith's
own path, and a runtime override the user set is never replaced.
"""

from __future__ import annotations

import asyncio
import traceback
from collections.abc import Iterator
from typing import Any
from unittest.mock import MagicMock

import langsmith
import pytest
from langchain.agents import create_agent
from langchain_core.messages import HumanMessage
from langsmith._runtime_overrides import get_runtime_overrides

from langchain_om.engine import ObservationalMemory
from langchain_om.integrations import langsmith_hops
from langchain_om.integrations.middleware import ObservationalMemoryMiddleware
from langchain_om.store.base import implicit_resource
from langchain_om.store.memory import InMemoryStore
from langchain_om.testing import ScriptedAgentModel, ScriptedObserverModel

TEXTS = [
    "Please plan the Lisbon trip; my budget is 300 euros.",
    "京都旅行の計画を手伝ってください。予算は三万円です。🚄",
]


@pytest.fixture(autouse=True)
def no_override() -> Iterator[None]:
    """Each test starts without a LangSmith runtime override and leaves none behind."""
    before = get_runtime_overrides().aio_to_thread
    langsmith.set_runtime_overrides()
    yield
    langsmith.set_runtime_overrides(aio_to_thread=before)


def make_agent(**options: Any) -> tuple[Any, ObservationalMemory]:
    om = ObservationalMemory(InMemoryStore(), model=ScriptedObserverModel(), token_counter="estimator")
    agent = create_agent(ScriptedAgentModel(), [], middleware=[ObservationalMemoryMiddleware(om, **options)])
    return agent, om


async def run_turns(agent: Any, thread: str) -> list[str]:
    """Run one turn per text; returns where each ``run_in_executor`` call came from."""
    loop = asyncio.get_running_loop()
    origins: list[str] = []
    original = loop.run_in_executor

    def spy(executor: Any, func: Any, *args: Any) -> Any:
        origins.append(" ".join(f.filename for f in traceback.extract_stack(limit=8)))
        return original(executor, func, *args)

    loop.run_in_executor = spy  # type: ignore[method-assign]
    try:
        for i, text in enumerate(TEXTS):
            await agent.ainvoke({"messages": [HumanMessage(text, id=f"h{i}")]}, {"configurable": {"thread_id": thread}})
    finally:
        loop.run_in_executor = original  # type: ignore[method-assign]
    return origins


def from_langsmith(origins: list[str]) -> int:
    return sum("langsmith" in origin for origin in origins)


async def test_untraced_turns_make_no_langsmith_thread_hop() -> None:
    agent, om = make_agent()
    origins = await run_turns(agent, "t-inline")
    assert from_langsmith(origins) == 0
    rows = await om.store.aget_messages(implicit_resource("t-inline"), "t-inline")
    assert [r.data["data"]["content"] for r in rows if r.data["type"] == "human"] == TEXTS  # the turns did happen
    assert sum(r.data["type"] == "ai" for r in rows) == len(TEXTS)
    await om.aclose()


async def test_switched_off_langsmith_is_left_alone() -> None:
    agent, om = make_agent(inline_untraced_hooks=False)
    assert get_runtime_overrides().aio_to_thread is None
    origins = await run_turns(agent, "t-off")
    assert from_langsmith(origins) == 2 * len(TEXTS)  # LangSmith's own set-up and tear-down hops
    await om.aclose()


async def test_an_instance_switched_off_keeps_its_hops_when_another_installed_the_override() -> None:
    make_agent()  # installs the override
    agent, om = make_agent(inline_untraced_hooks=False)
    assert get_runtime_overrides().aio_to_thread is langsmith_hops.inline_untraced
    origins = await run_turns(agent, "t-off-2")
    assert from_langsmith(origins) == len(TEXTS)  # set-up in LangSmith's thread; the empty run's end inline
    await om.aclose()


async def test_a_traced_hook_still_goes_through_langsmith() -> None:
    """Tracing on: the hook's run is created and ended by LangSmith, in its worker thread."""
    agent, om = make_agent()
    client = MagicMock(spec=langsmith.Client)
    with langsmith.tracing_context(enabled=True, client=client, project_name="om-test"):
        origins = await run_turns(agent, "t-traced")
    assert from_langsmith(origins) == 2 * len(TEXTS)  # set-up and tear-down in LangSmith's thread
    hook = "ObservationalMemoryMiddleware.awrap_model_call"
    created = {c.kwargs["id"]: c.kwargs for c in client.create_run.mock_calls}
    hook_runs = [run_id for run_id, run in created.items() if run["name"] == hook]
    assert len(hook_runs) == len(TEXTS)
    assert {c.kwargs["run_id"] for c in client.update_run.mock_calls if c.kwargs["name"] == hook} == set(hook_runs)
    # the model's own span nests under OM's hook, as it does without the override
    model_parents = {run.get("parent_run_id") for run in created.values() if run["name"] == "ScriptedAgentModel"}
    assert model_parents == set(hook_runs)
    await om.aclose()


def test_a_users_override_is_never_replaced() -> None:
    async def users_own(default: Any, ctx: Any, func: Any, /, *args: Any, **kwargs: Any) -> Any:
        return await default(ctx, func, *args, **kwargs)

    langsmith.set_runtime_overrides(aio_to_thread=users_own)
    make_agent()
    assert get_runtime_overrides().aio_to_thread is users_own
    assert langsmith_hops.install() is False


def test_install_is_idempotent_and_the_flag_is_checked() -> None:
    assert langsmith_hops.install() is True
    assert langsmith_hops.install() is True
    assert get_runtime_overrides().aio_to_thread is langsmith_hops.inline_untraced
    om = ObservationalMemory(InMemoryStore(), model=ScriptedObserverModel(), token_counter="estimator")
    with pytest.raises(TypeError, match="inline_untraced_hooks"):
        ObservationalMemoryMiddleware(om, inline_untraced_hooks="yes")  # type: ignore[arg-type]
