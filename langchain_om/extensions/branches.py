"""Checkpoint-aware memory: OM follows the LangGraph checkpoint a run starts from.

LangGraph lets a caller run a thread from any earlier checkpoint (time travel with new input,
replay with ``None``, ``update_state`` on a past checkpoint, resuming an old interrupt). OM's
store, by itself, only knows the newest state of a thread, so without this module such a run
would see the abandoned future. The integrations (graph nodes, middleware) therefore keep OM's
*position* in the checkpointed state (``state["om_position"]``): the resource, the OM thread
(branch) the checkpoint belongs to, the last stored ``seq`` and the record version it saw.

Each step compares that position with the store. When OM has stored rows on that branch which
the caller's state never had, the caller runs from an earlier point: OM *forks* a new branch,
an internal thread ``"<thread>\\x1ebranch:<id>"`` under the same resource, whose record is the
snapshot of the record at the checkpoint's version, and which receives copies of the rows that
were still unobserved at that point (bounded by the observation thresholds). Observed history
stays in the parent; the branch's thread metadata names the parent and the fork ``seq``. The
original branch is never touched, so going back to its latest checkpoint finds its own memory.

Record snapshots (and thread-scope working memory documents) are kept in the store's key-value
table, written once per record version a checkpoint can name, so no schema change is needed.
"""

from __future__ import annotations

import hashlib
import json
import weakref
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, cast

from langchain_core.messages import BaseMessage
from langchain_core.runnables import RunnableConfig
from langgraph.constants import CONFIG_KEY_CHECKPOINTER

from ..store.base import (
    BRANCH_MARK,
    NewMessage,
    OMRecord,
    RecordConflictError,
    StoredMessage,
    SupportsThreadHead,
    new_id,
    thread_key,
)
from ..store.step_fast_paths import SupportsHeadAppend, SupportsNewAppend, ThreadHead, supports
from .fork_point import afork_point, new_ids

if TYPE_CHECKING:
    from .host import MemoryHost

POSITION_KEY = "om_position"
"""The state key holding OM's position (graph nodes and middleware write it)."""
SNAPSHOT_NAMESPACE = "om-branch"
"""Key-value namespace of record snapshots and working memory documents, per resource."""
_WM_NAMESPACE = "working_memory"


class ForeignResourceError(ValueError):
    """The run's config names another resource than the one the thread's checkpoint runs under."""


def branch_root(thread_id: str) -> str:
    """The LangGraph thread an OM thread belongs to (itself unless it is a branch)."""
    return thread_id.split(BRANCH_MARK, 1)[0]


def is_branch(thread_id: str) -> bool:
    return BRANCH_MARK in thread_id


@dataclass(frozen=True)
class Position:
    """OM's place in a checkpoint: enough to tell "continues" from "runs from the past"."""

    resource_id: str | None
    branch: str
    seq: int
    record: str | None = None
    version: int | None = None
    working_memory: str | None = None

    def to_state(self) -> dict[str, Any]:
        return {"resource_id": self.resource_id, "branch": self.branch, "seq": self.seq,
                "record": self.record, "version": self.version, "working_memory": self.working_memory}

    @classmethod
    def from_state(cls, value: Any) -> Position | None:
        """Parse ``state["om_position"]``; None when absent, a clear error when malformed."""
        if value is None:
            return None
        where = f"state.{POSITION_KEY}"
        if not isinstance(value, Mapping):
            raise ValueError(f"{where}: expected a mapping written by langchain-om, got {type(value).__name__}")
        resource, branch, seq = value.get("resource_id"), value.get("branch"), value.get("seq")
        record, version, wm = value.get("record"), value.get("version"), value.get("working_memory")
        if resource is not None and not isinstance(resource, str):
            raise ValueError(f"{where}.resource_id: expected a string or None")
        if not isinstance(branch, str) or not branch:
            raise ValueError(f"{where}.branch: expected a non-empty string")
        if not isinstance(seq, int) or isinstance(seq, bool) or seq < 0:
            raise ValueError(f"{where}.seq: expected a non-negative integer")
        if record is not None and not isinstance(record, str):
            raise ValueError(f"{where}.record: expected a string or None")
        if version is not None and (not isinstance(version, int) or isinstance(version, bool)):
            raise ValueError(f"{where}.version: expected an integer or None")
        if wm is not None and not isinstance(wm, str):
            raise ValueError(f"{where}.working_memory: expected a string or None")
        return cls(resource, branch, seq, record, version, wm)


@dataclass
class BranchRun:
    """Where one step runs: the caller's thread, OM's branch of it, and the explicit resource."""

    thread_id: str
    branch: str
    resource_id: str | None
    forked: bool = False
    deferred: int | None = None
    """The position's seq when the fork check is left to the step's append (``aresolve(defer=True)``)."""
    only_new: frozenset[str] | None = None
    """Without a position: the state's ids, when the fork check is left to an append that proves
    none of them stored (``aresolve(defer=True)``, ``SupportsNewAppend``)."""


_CACHE_LIMIT = 4096  # entries per in-process cache: a long-lived server forgets the least recently used


class _Bounded(OrderedDict[Any, Any]):
    """An LRU map: forgetting an entry only costs a repeated (idempotent) store write or read."""

    limit = _CACHE_LIMIT

    def remember(self, key: Any, value: Any = None) -> None:
        self[key] = value
        self.move_to_end(key)
        while len(self) > self.limit:
            self.popitem(last=False)


class _Records(_Bounded):
    """Record snapshots of runs without a checkpointer, kept in this process only (a few: each
    holds an observation log)."""

    limit = 64


@dataclass
class _Cache:
    snapshots: _Bounded = field(default_factory=_Bounded)  # (resource, record id, version) written
    unsaved: _Records = field(default_factory=_Records)  # (resource, record id, version) -> record, not written
    documents: _Bounded = field(default_factory=_Bounded)  # (resource, digest) written
    active: _Bounded = field(default_factory=_Bounded)  # thread -> (resource, branch) of its latest step


_CACHES: weakref.WeakKeyDictionary[MemoryHost, _Cache] = weakref.WeakKeyDictionary()


def _cache(om: MemoryHost) -> _Cache:
    cache = _CACHES.get(om)
    if cache is None:
        cache = _CACHES[om] = _Cache()
    return cache


def is_checkpointed(config: RunnableConfig | None) -> bool:
    """Whether the run saves checkpoints: LangGraph hands every node the checkpointer (its
    graph's, or the parent graph's for a subgraph) in the config, None when there is none."""
    configurable = (config or {}).get("configurable") or {}
    return configurable.get(CONFIG_KEY_CHECKPOINTER) is not None


def active_branch(om: MemoryHost, thread_id: str, resource_id: str | None) -> tuple[str, str | None]:
    """``(branch, resource)`` the current run of ``thread_id`` uses, for OM's tools (recall,
    working memory), which only see the run config. The integrations set it every step."""
    found = _cache(om).active.get(thread_id)
    if found is None:
        return thread_id, resource_id
    resource, branch = found
    if resource_id is not None and resource is not None and resource != resource_id:
        return thread_id, resource_id  # not this run's resource: the caller's own thread, unchanged
    return branch, resource_id if resource_id is not None else resource


def check_resource(thread_id: str, configured: str | None, position: Position | None) -> str | None:
    """The explicit resource of a run: the config's, else the one the checkpoint ran under.

    A config naming another resource than the checkpoint's is refused: the checkpoint is the
    caller's own thread, so its resource is the thread's; any other would read or write another
    user's memory (or hide this thread's behind a fresh one)."""
    if position is None:
        return configured
    if configured is not None and configured != position.resource_id:
        owner = "a private resource (no resource_id)" if position.resource_id is None else "another resource"
        raise ForeignResourceError(
            f'config["configurable"]["resource_id"]: thread {thread_id!r} runs under {owner}; '
            "a config for this thread must name the same resource or none (configs from "
            "get_state_history/get_state carry none and use the thread's own)"
        )
    return position.resource_id


async def aresolve(
    om: MemoryHost,
    thread_id: str,
    configured_resource: str | None,
    state_position: Any,
    messages: Sequence[BaseMessage],
    *,
    defer: bool = False,
) -> BranchRun:
    """Decide the branch a step runs on, forking when the caller runs from an earlier checkpoint.

    ``defer``: when the state has a position and the store's append can check the branch's last seq
    (``SupportsHeadAppend``), skip the read that tells a continuing step: ``run.deferred`` holds the
    position's seq for the step's append to check (``engine.persistence.HEAD_AT_MOST``). Without a
    position, when the engine knows none of the state's ids as stored and the store's append can
    prove it (``SupportsNewAppend``), skip the fork probe: ``run.only_new`` holds the ids
    (``engine.persistence.ONLY_NEW``). A state sharing no stored message never forks."""
    position = Position.from_state(state_position)
    resource = check_resource(thread_id, configured_resource, position)
    if position is not None and branch_root(position.branch) != thread_id:
        position = None  # a state copied from another thread: start from this thread's own memory
    branch = position.branch if position is not None else thread_id
    resolved = om.resolve_resource(branch, resource)
    await om.aensure_setup()
    run = BranchRun(thread_id, branch, resource)
    if defer and position is not None and supports(om.store, SupportsHeadAppend):
        run.deferred = position.seq
        _cache(om).active.remember(thread_id, (resource, run.branch))
        return run
    if defer and position is None and supports(om.store, SupportsNewAppend):
        incoming = new_ids(om, resolved, branch, messages)
        if incoming is not None:
            run.only_new = incoming
            _cache(om).active.remember(thread_id, (resource, run.branch))
            return run
    fork_seq = await afork_point(om, resolved, branch, position.seq if position is not None else None, messages)
    if fork_seq is not None:
        run.branch = await _afork(om, resolved, thread_id, branch, fork_seq, position)
        run.forked = True
    _cache(om).active.remember(thread_id, (resource, run.branch))
    return run


async def _afork(
    om: MemoryHost, resolved: str, thread_id: str, parent: str, fork_seq: int,
    position: Position | None,
) -> str:
    """Create the branch thread: the record as of the checkpoint, plus copies of the rows that
    were unobserved then (and the newest row the state holds, so the next step knows where the
    state's messages end). Cost: the snapshot and those rows, independent of the history length."""
    store = om.store
    snapshot = await load_snapshot(om, resolved, position)
    base = min(snapshot.last_observed_seq.get(parent, 0), fork_seq) if snapshot is not None else 0
    rows = await store.aget_messages(resolved, parent, after_seq=base, before_seq=fork_seq + 1)
    observed_prefix: list[StoredMessage] = []
    if base > 0 and not any(r.kind == "message" for r in rows):
        older = await store.aget_messages(resolved, parent, before_seq=base + 1, limit=16, descending=True)
        for row in older:
            observed_prefix.insert(0, row)
            if row.kind == "message":
                break
    branch = f"{thread_id}{BRANCH_MARK}{new_id()[:16]}"
    await store.aensure_thread(resolved, branch, metadata={
        "om_branch": {"parent": parent, "fork_seq": fork_seq, "base_seq": base - len(observed_prefix),
                      "thread_id": thread_id},
    })
    copies = [NewMessage(id=r.id, data=r.data, tokens=r.tokens, created_at=r.created_at, kind=r.kind)
              for r in [*observed_prefix, *rows]]
    inserted = await store.aappend_messages(resolved, branch, copies)
    # a new thread holds exactly its copies; the parent's parsed messages stand for them (parsing,
    # not copying, is most of a fork's cost)
    parsed = om.parsed_messages(resolved, parent)
    om.remember_thread_rows(resolved, branch, inserted,
                            {r.id: parsed[r.id] for r in [*observed_prefix, *rows] if r.id in parsed})
    new_seq = {old.seq: new.seq for old, new in zip([*observed_prefix, *rows], inserted, strict=False)}
    prefix = len(observed_prefix)
    if om.config.scope == "thread":
        record = _branch_record(resolved, branch, parent, snapshot, new_seq, prefix)
        await store.acommit_record(record, expected_version=0, mark_observed={branch: prefix} if prefix else None)
    elif prefix:
        await _mark_resource_watermark(om, resolved, branch, prefix)
    await _copy_working_memory(om, resolved, branch, position)
    await _register(om, resolved, thread_id, "branches", branch)
    return branch


def _branch_record(
    resolved: str, branch: str, parent: str, snapshot: OMRecord | None, new_seq: Mapping[int, int], prefix: int,
) -> OMRecord:
    if snapshot is None:
        return OMRecord(resource_id=resolved, thread_id=branch, scope="thread",
                        last_observed_seq={branch: prefix} if prefix else {})
    chunks = []
    for chunk in snapshot.buffered_chunks:
        start, end = new_seq.get(chunk.start_seq), new_seq.get(chunk.end_seq)
        if start is not None and end is not None:  # a chunk always covers rows copied with it
            chunks.append(chunk.model_copy(update={"thread_id": branch, "start_seq": start, "end_seq": end}))
    last_id = snapshot.last_observed_id.get(parent)
    return snapshot.model_copy(deep=True, update={
        "id": new_id("om_"), "thread_id": branch, "version": 0, "buffered_chunks": chunks,
        "last_observed_seq": {branch: prefix} if prefix else {},
        "last_observed_id": {branch: last_id} if last_id else {},
    })


async def _mark_resource_watermark(om: MemoryHost, resolved: str, branch: str, prefix: int) -> None:
    """Resource scope shares one record: only the branch's watermark is added to it."""
    for _ in range(5):
        record = await om.store.aget_record(resolved, None)
        if record is None:
            return
        updated = record.model_copy(deep=True)
        updated.last_observed_seq[branch] = prefix
        try:
            await om.store.acommit_record(updated, expected_version=record.version, mark_observed={branch: prefix})
            return
        except RecordConflictError:
            continue


async def load_snapshot(om: MemoryHost, resolved: str, position: Position | None) -> OMRecord | None:
    """The record as ``position`` saw it: kept in this process (a run without a checkpointer) or
    stored; None when neither holds it. The kept object is shared: copy it before changing it."""
    if position is None or position.record is None or position.version is None:
        return None
    kept: OMRecord | None = _cache(om).unsaved.get((resolved, position.record, position.version))
    if kept is not None:
        return kept
    value = await om.store.aget_value(resolved, SNAPSHOT_NAMESPACE, f"record:{position.record}:{position.version}")
    if value is None:
        return None
    return OMRecord.model_validate(value)


def _wm_key(branch: str) -> str:
    return f"thread:{thread_key(branch)}"  # working_memory's key for a thread's document


async def _copy_working_memory(om: MemoryHost, resolved: str, branch: str, position: Position | None) -> None:
    """A thread-scope working memory document follows the branch; a resource-scope one is the
    user's across threads and stays shared."""
    if om.working_memory is None or om.working_memory.settings.scope != "thread":
        return
    if position is None or position.working_memory is None:
        return
    document = await om.store.aget_value(resolved, SNAPSHOT_NAMESPACE, f"wm:{position.working_memory}")
    if document is not None:
        await om.store.aput_value(resolved, _WM_NAMESPACE, _wm_key(branch), document)


async def aposition(om: MemoryHost, run: BranchRun, head: ThreadHead | None = None, *,
                    checkpointed: bool = True) -> dict[str, Any]:
    """The position to write into the checkpointed state after a step on ``run.branch``.

    Keeps what a later fork from this checkpoint needs: the record snapshot of this version
    (written once per version) and the working memory document (once per distinct document).
    A step that changed nothing costs one small read (the branch's last seq) and a cached record
    check; none with ``head``, the branch's head as the turn's own append just committed it.

    ``checkpointed`` False (``is_checkpointed``: the run saves no checkpoint): no later run can
    resume from this position, only the rest of this run reads it back, so the record snapshot
    stays in this process (``_Records``) instead of a store write (a transaction and the whole
    record as JSON, on each new version)."""
    cache = _cache(om)
    resolved = om.resolve_resource(run.branch, run.resource_id)
    if head is not None:
        seq, stamp = head
        record = await om.arecord_at_stamp(resolved, run.branch, stamp)
    elif supports(om.store, SupportsThreadHead):  # one read for both
        seq, stamp = await cast("SupportsThreadHead", om.store).aget_thread_head(
            resolved, run.branch, om.record_thread(run.branch))
        record = await om.arecord_at_stamp(resolved, run.branch, stamp)
    else:
        seq = await om.store.alast_seq(resolved, run.branch)
        record = await om.aload_record(resolved, run.branch)  # cached: a stamp read when unchanged
    snap_key = (resolved, record.id, record.version)
    if not checkpointed:
        if snap_key not in cache.snapshots:
            cache.unsaved.remember(snap_key, record)  # records are never changed in place (editable())
    elif snap_key not in cache.snapshots:
        await om.store.aput_value(resolved, SNAPSHOT_NAMESPACE, f"record:{record.id}:{record.version}",
                                  record.model_dump(mode="json"))
        cache.snapshots.remember(snap_key)
    document_hash = await _remember_working_memory(om, cache, resolved, run.branch)
    return Position(run.resource_id, run.branch, seq, record.id, record.version, document_hash).to_state()


async def _remember_working_memory(om: MemoryHost, cache: _Cache, resolved: str, branch: str) -> str | None:
    if om.working_memory is None or om.working_memory.settings.scope != "thread":
        return None
    document = await om.store.aget_value(resolved, _WM_NAMESPACE, _wm_key(branch))
    if document is None:
        return None
    digest = hashlib.sha256(json.dumps(document, sort_keys=True, default=str).encode()).hexdigest()[:32]
    if (resolved, digest) not in cache.documents:
        await om.store.aput_value(resolved, SNAPSHOT_NAMESPACE, f"wm:{digest}", document)
        await _register(om, resolved, branch_root(branch), "documents", digest)
        cache.documents.remember((resolved, digest))
    return digest


def _registry_key(thread_id: str) -> str:
    return f"thread:{thread_id}"


async def _register(om: MemoryHost, resolved: str, thread_id: str, field_name: str, value: str) -> None:
    """Remember what a thread's time travel left in the store (its branches, working memory
    documents), so deleting the thread deletes them too. Written only on a fork or a new document."""
    registry = await om.store.aget_value(resolved, SNAPSHOT_NAMESPACE, _registry_key(thread_id))
    entry = dict(registry) if isinstance(registry, Mapping) else {}
    values = [v for v in entry.get(field_name, []) if isinstance(v, str)]
    if value not in values:
        entry[field_name] = [*values, value]
        await om.store.aput_value(resolved, SNAPSHOT_NAMESPACE, _registry_key(thread_id), entry)


async def adelete_branches(om: MemoryHost, thread_id: str, resource_id: str | None,
                           delete_thread: Callable[[str], Awaitable[None]]) -> None:
    """Delete what time travel kept for a thread: its branch threads (messages and records), the
    record snapshots of the thread and its branches, and its working memory documents.

    ``ObservationalMemory.adelete_thread`` calls it before deleting the thread itself (and passes
    itself as ``delete_thread`` for the branch threads). The key-value
    table has no delete, so snapshots are overwritten with null (``aget_value`` then reads None)."""
    if is_branch(thread_id):
        return
    resolved = om.resolve_resource(thread_id, resource_id)
    registry = await om.store.aget_value(resolved, SNAPSHOT_NAMESPACE, _registry_key(thread_id))
    entry = registry if isinstance(registry, Mapping) else {}
    branches = [b for b in entry.get("branches", []) if isinstance(b, str) and branch_root(b) == thread_id]
    for thread in [thread_id, *branches]:
        if om.config.scope == "thread":
            await _forget_snapshots(om, resolved, thread)
    for branch in branches:
        await delete_thread(branch)
    for digest in entry.get("documents", []):
        if isinstance(digest, str):
            await om.store.aput_value(resolved, SNAPSHOT_NAMESPACE, f"wm:{digest}", None)
    if registry is not None:
        await om.store.aput_value(resolved, SNAPSHOT_NAMESPACE, _registry_key(thread_id), None)
    cache = _cache(om)
    cache.active.pop(thread_id, None)
    for written in (cache.snapshots, cache.documents):  # written again if the thread comes back
        for key in [k for k in written if k[0] == resolved]:
            del written[key]


async def _forget_snapshots(om: MemoryHost, resolved: str, thread: str) -> None:
    record = await om.store.aget_record(resolved, thread)
    if record is None:
        return
    for version in range(1, record.version + 1):
        key = f"record:{record.id}:{version}"
        if await om.store.aget_value(resolved, SNAPSHOT_NAMESPACE, key) is not None:
            await om.store.aput_value(resolved, SNAPSHOT_NAMESPACE, key, None)


async def abranch_lineage(om: MemoryHost, resolved: str, branch: str) -> list[tuple[str, int]]:
    """``[(thread, up_to_seq), ...]`` from the root down to ``branch``: the rows a branch's
    history consists of (each ancestor up to the seq the next one copied from; the branch whole)."""
    chain: list[tuple[str, int]] = []
    current, limit = branch, -1
    for _ in range(64):
        chain.insert(0, (current, limit))
        if not is_branch(current):
            break
        info = await om.store.aget_thread(resolved, current)
        meta = (info.metadata if info is not None else {}).get("om_branch")
        if not isinstance(meta, Mapping) or not isinstance(meta.get("parent"), str):
            break
        base = meta.get("base_seq")
        current, limit = meta["parent"], int(base) if isinstance(base, int) else 0
    return chain


class LineageView:
    """The store as ``recall`` sees it from a branch: the branch's thread reads as its whole
    history (each ancestor's rows up to where the next one starts, then the branch's own), with
    ``seq`` numbered along that history. Other threads, the abandoned futures included, read as
    stored: they stay reachable when asked for by id, never by paging the current thread."""

    def __init__(self, store: Any, branch: str, segments: Sequence[tuple[str, int, int]]) -> None:
        self._store = store
        self.branch = branch
        self.segments = list(segments)  # (thread, rows up to this seq or -1 for all, seq offset)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

    def _mapped(self, row: StoredMessage, offset: int) -> StoredMessage:
        return row.model_copy(update={"seq": row.seq + offset, "thread_id": self.branch})

    async def alast_seq(self, resource_id: str, thread_id: str) -> int:
        if thread_id != self.branch:
            return int(await self._store.alast_seq(resource_id, thread_id))
        _, _, offset = self.segments[-1]
        return offset + int(await self._store.alast_seq(resource_id, thread_id))

    async def aget_messages(
        self, resource_id: str, thread_id: str, *, after_seq: int = 0, before_seq: int | None = None,
        limit: int | None = None, descending: bool = False,
    ) -> list[StoredMessage]:
        if thread_id != self.branch:
            rows: list[StoredMessage] = await self._store.aget_messages(
                resource_id, thread_id, after_seq=after_seq, before_seq=before_seq, limit=limit, descending=descending)
            return rows
        out: list[StoredMessage] = []
        for thread, upto, offset in (reversed(self.segments) if descending else self.segments):
            if limit is not None and len(out) >= limit:
                break
            low = max(after_seq - offset, 0)
            high = None if before_seq is None else before_seq - offset
            if upto >= 0:
                high = upto + 1 if high is None else min(high, upto + 1)
            if high is not None and high <= low + 1:
                continue
            rest = None if limit is None else limit - len(out)
            found = await self._store.aget_messages(resource_id, thread, after_seq=low, before_seq=high,
                                                    limit=rest, descending=descending)
            out.extend(self._mapped(r, offset) for r in found)
        return out

    async def aget_message(self, resource_id: str, message_id: str) -> StoredMessage | None:
        found: StoredMessage | None = await self._store.aget_message(resource_id, message_id)
        if found is None:
            return None
        for thread, upto, offset in self.segments:
            if found.thread_id == thread and (upto < 0 or found.seq <= upto):
                return self._mapped(found, offset)
        return found


def timeline_threads(view: Any, current: str) -> list[str]:
    """The stored threads the current thread's history is read from (a branch's ancestors, then itself)."""
    return [thread for thread, _, _ in view.segments] if isinstance(view, LineageView) else [current]


def on_timeline(view: Any, current: str, row: StoredMessage) -> StoredMessage | None:
    """A found row as the current thread sees it, the way paging reads it (``LineageView``): a row
    of the current history is the current thread's (its ``seq`` along that history); a row of
    another branch of the same conversation (the future a run from an earlier checkpoint left, or
    a sibling fork) is None, as it never happened on this branch; another conversation's row is
    itself."""
    segments = view.segments if isinstance(view, LineageView) else [(current, -1, 0)]
    for thread, upto, offset in segments:
        if row.thread_id == thread:
            if upto >= 0 and row.seq > upto:
                return None
            if thread == current and not offset:
                return row
            return row.model_copy(update={"seq": row.seq + offset, "thread_id": current})
    return None if branch_root(row.thread_id) == branch_root(current) else row


async def alineage_view(om: MemoryHost, resolved: str, branch: str) -> Any:
    """``om.store``, or a ``LineageView`` of it when ``branch`` is a branch thread."""
    if not is_branch(branch):
        return om.store
    segments: list[tuple[str, int, int]] = []
    offset = 0
    for thread, upto in await abranch_lineage(om, resolved, branch):
        segments.append((thread, upto, offset))
        offset += max(upto, 0)
    return LineageView(om.store, branch, segments)
