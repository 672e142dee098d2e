"""The storage contract every OM store implements.

Stores keep three things per resource: threads, raw messages (never deleted by
OM, only marked observed) and OM records. A record changes only through
``acommit_record``, which compares the record's ``version`` and marks messages
observed in the same transaction; a step that lost a race gets
``RecordConflictError`` and redoes its work from the fresh record. That single
compare-and-swap is what keeps two workers from observing the same messages
twice on any backend.
"""

from __future__ import annotations

import asyncio
import os
import random
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime, timezone
from operator import attrgetter
from typing import Any, Literal, Protocol, runtime_checkable

from pydantic import BaseModel, ConfigDict, Field

from .ids import BRANCH_MARK as BRANCH_MARK
from .ids import IMPLICIT_RESOURCE_PREFIX as IMPLICIT_RESOURCE_PREFIX
from .ids import RESOURCE_SCOPE_THREAD as RESOURCE_SCOPE_THREAD
from .ids import InvalidStoreInput as InvalidStoreInput
from .ids import check_id as check_id
from .ids import check_resource_id as check_resource_id
from .ids import check_thread_id as check_thread_id
from .ids import implicit_resource as implicit_resource
from .ids import record_key as record_key
from .ids import replace_lone_surrogates as replace_lone_surrogates
from .ids import thread_key as thread_key

SCHEMA_VERSION = 10
"""1: the tables. 2: threads used without a resource move to their private resource
(``IMPLICIT_RESOURCE_PREFIX``); see ``_util.V1_IMPLICIT_THREADS_SQL`` for how they are told apart.
3: a partial index of the unobserved messages (commits touch only the rows they mark).
4: recall search: the keyword index (backfilled) and the stored embeddings.
5: leases, so one worker at a time pays for a record's Observer call.
6: PostgreSQL: each thread's all-observed prefix (``threads.observed_through``) bounds a commit's
marking, replacing the v3 index there (its dead entries made a commit walk the history until
VACUUM); SQLite: nothing (its v3 index shrinks in place, so commits were already bounded).
7: the CJK keyword index (character bigrams, ``store.cjk``), backfilled in resumable batches.
8: vector segments (``store.vector_segments``): a restart reads a resource's embeddings as a few blobs.
9: each message's content fingerprint in a column of its own (``store.known.FINGERPRINT_PATH``), so a
cold step handed a whole history reads a column instead of every row's JSON; backfilled in resumable
batches (``sqlite/fingerprints``, ``postgres/fingerprints``).
10: SQLite: the keyword-index queue (``sqlite/keyword_queue``): appended messages are indexed in
batches, and every search indexes what is queued first; PostgreSQL: nothing (its index is written
with the row into a GIN index, which batches its own writes in its pending list). The number
stays in step so both stores share it."""


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


_ID_BITS = random.Random()  # seeded from os.urandom; reseeded in a forked child (below)
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_ID_BITS.seed)


def new_id(prefix: str = "") -> str:
    """A unique id: 128 random bits in hex, as long as a uuid4's. Ids name records, groups,
    cycles and leases, never secrets: ``uuid4`` asked the kernel for its bits every time, a
    system call per id (several per background cycle)."""
    return f"{prefix}{_ID_BITS.getrandbits(128):032x}"


class StoreError(RuntimeError):
    """A storage failure that is not the caller's fault."""


class RecordConflictError(StoreError):
    """The record changed since it was read; reload and redo the step."""


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ThreadInfo(_Model):
    thread_id: str
    resource_id: str
    title: str | None = None
    created_at: datetime = Field(default_factory=utcnow)
    updated_at: datetime = Field(default_factory=utcnow)
    metadata: dict[str, Any] = Field(default_factory=dict)


MessageKind = Literal["message", "temporal-marker", "edit"]
"""``edit``: a later version of an already observed message (see ``langchain_om.foundation.inputs``)."""


class NewMessage(_Model):
    """A message to store: ``data`` is ``langchain_core.messages.message_to_dict`` output."""

    id: str
    data: dict[str, Any]
    tokens: int = 0
    created_at: datetime = Field(default_factory=utcnow)
    kind: MessageKind = "message"


class StoredMessage(_Model):
    """A stored message. ``seq`` is the store-assigned order inside its thread (1, 2, 3, ...)."""

    id: str
    thread_id: str
    resource_id: str
    seq: int
    data: dict[str, Any]
    tokens: int = 0
    created_at: datetime
    kind: MessageKind = "message"
    observed: bool = False
    observed_at: datetime | None = None


class SearchHit(BaseModel):
    """A message found by keyword search; a higher ``score`` is more relevant (comparable within one search)."""

    model_config = ConfigDict(extra="forbid")

    message: StoredMessage
    score: float


class VectorItem(BaseModel):
    """The embedding of one stored message."""

    model_config = ConfigDict(extra="forbid")

    thread_id: str
    message_id: str
    vector: bytes


class VectorBatch(BaseModel):
    """Stored embeddings, column by column (100k rows load in one pass, no object per row).
    ``positions`` grow with every insert, so a reader can fetch only newer rows."""

    model_config = ConfigDict(extra="forbid")

    positions: list[int] = Field(default_factory=list)
    thread_ids: list[str] = Field(default_factory=list)
    message_ids: list[str] = Field(default_factory=list)
    vectors: list[bytes] = Field(default_factory=list)

    def __len__(self) -> int:
        return len(self.positions)

    @classmethod
    def of(cls, rows: Sequence[Sequence[Any]]) -> VectorBatch:
        """From ``(pos, thread_id, message_id, vector)`` rows, trusted (read back from the store)."""
        return cls.model_construct(
            positions=[int(r[0]) for r in rows], thread_ids=[r[1] for r in rows],
            message_ids=[r[2] for r in rows], vectors=[bytes(r[3]) for r in rows],
        )


class ObservationGroup(_Model):
    """One block of the observation log with a durable pointer to the messages it came from."""

    id: str = Field(default_factory=lambda: new_id("og_"))
    thread_id: str
    start_id: str
    end_id: str
    text: str
    tokens: int = 0
    created_at: datetime = Field(default_factory=utcnow)
    generation: int = 0
    source: Literal["observation", "reflection", "buffered"] = "observation"
    thread_ids: list[str] = Field(default_factory=list)


class BufferedChunk(_Model):
    """Observations computed in the background, waiting for activation."""

    id: str = Field(default_factory=lambda: new_id("chunk_"))
    thread_id: str
    start_seq: int
    end_seq: int
    start_id: str
    end_id: str
    message_count: int
    message_tokens: int
    observations: str
    observation_tokens: int
    current_task: str | None = None
    suggested_response: str | None = None
    thread_title: str | None = None
    """The title the Observer proposed (``observation.thread_title``), applied at activation."""
    extracted: dict[str, Any] = Field(default_factory=dict)
    created_at: datetime = Field(default_factory=utcnow)
    cycle_id: str | None = None


class BufferedReflection(_Model):
    """A background reflection over the first ``covers_groups`` groups of the log."""

    id: str = Field(default_factory=lambda: new_id("refl_"))
    covered_group_ids: list[str]
    text: str
    input_tokens: int
    output_tokens: int
    created_at: datetime = Field(default_factory=utcnow)
    cycle_id: str | None = None
    extracted: dict[str, Any] = Field(default_factory=dict)


class OMRecord(_Model):
    """The OM state of one thread (thread scope) or one resource (resource scope)."""

    id: str = Field(default_factory=lambda: new_id("om_"))
    resource_id: str
    thread_id: str | None = None
    scope: Literal["thread", "resource"] = "thread"
    groups: list[ObservationGroup] = Field(default_factory=list)
    generation_count: int = 0
    last_observed_seq: dict[str, int] = Field(default_factory=dict)
    last_observed_id: dict[str, str] = Field(default_factory=dict)
    last_observed_at: datetime | None = None
    buffered_chunks: list[BufferedChunk] = Field(default_factory=list)
    buffered_reflection: BufferedReflection | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)
    version: int = 0
    created_at: datetime = Field(default_factory=utcnow)
    updated_at: datetime = Field(default_factory=utcnow)

    @property
    def key(self) -> str:
        return record_key(self.resource_id, self.thread_id if self.scope == "thread" else None)

    @property
    def observation_tokens(self) -> int:
        return sum(group.tokens for group in self.groups)

    @property
    def observations(self) -> str:
        """The log as one text: the groups in order, consecutive groups of one day under one ``Date:``."""
        return merge_repeated_dates("\n\n".join(group.text for group in self.groups))

    @property
    def current_task(self) -> str | None:
        value = self.metadata.get("current_task")
        return value if isinstance(value, str) else None

    @property
    def suggested_response(self) -> str | None:
        value = self.metadata.get("suggested_response")
        return value if isinstance(value, str) else None


def merge_repeated_dates(log: str) -> str:
    """``log`` with every ``Date:`` header that repeats the one before it dropped, with the blank lines
    before it: each observation group carries its own header, so a day observed in several cycles would
    otherwise read as several days."""
    out: list[str] = []
    current: str | None = None
    for line in log.splitlines():
        if line.startswith("Date: "):
            if line == current:
                while out and not out[-1].strip():
                    out.pop()
                continue
            current = line
        out.append(line)
    return "\n".join(out)


def total_tokens(rows: Iterable[StoredMessage]) -> int:
    """Tokens of some stored messages (summed several times a step, so map, not a generator)."""
    return sum(map(_TOKENS, rows))


_TOKENS = attrgetter("tokens")


ValueUpdate = Callable[[Any], Any]
"""``aupdate_value``'s function: the stored value (or None) -> the value to store. It runs
inside the store's write transaction, so it must be quick and must not call the store."""


RecordStamp = tuple[int, datetime]
"""A stored record's ``(version, updated_at)``: both change on every commit, so an equal stamp
means the same stored record (a deleted and recreated record restarts its version but not its clock)."""


@runtime_checkable
class SupportsRecordStamp(Protocol):
    """Optional fast path of a store: a record's stamp without reading or parsing its body.

    The engine reads the record once per step; with this it parses the body only when the
    stamp changed, instead of every step. Stores without it keep working (full read each time).
    """

    async def aget_record_stamp(self, resource_id: str, thread_id: str | None) -> RecordStamp | None:
        """The stamp of the record for a thread (``thread_id``) or resource scope (``None``), or None."""


@runtime_checkable
class SupportsThreadHead(Protocol):
    """Optional fast path of a store: a thread's last ``seq`` and a record's stamp in one read.

    A checkpoint's position names both (``extensions/branches.py``); read apart they cost two
    round trips per position on a networked store. Stores without it answer in two reads."""

    async def aget_thread_head(
        self, resource_id: str, thread_id: str, record_thread: str | None
    ) -> tuple[int, RecordStamp | None]:
        """``(alast_seq(resource_id, thread_id), aget_record_stamp(resource_id, record_thread))``."""


@runtime_checkable
class SupportsLoopBinding(Protocol):
    """Optional: a store whose connections belong to the event loop that opened them (an asyncio
    connection pool). OM's sync twins then refuse to run from inside that loop, at once: they
    would block it while waiting for a connection only that loop can hand out."""

    def bound_loop(self) -> asyncio.AbstractEventLoop | None:
        """The running loop the store's connections belong to, or None."""



@runtime_checkable
class OMStore(Protocol):
    """Async storage used by the engine, the recall tool and the integrations.

    Every read takes ``resource_id`` and never returns rows of another resource.
    """

    async def asetup(self) -> None:
        """Create or migrate the schema (idempotent)."""

    async def aclose(self) -> None:
        """Release connections."""

    # threads
    async def aensure_thread(
        self, resource_id: str, thread_id: str, *, title: str | None = None, metadata: Mapping[str, Any] | None = None
    ) -> ThreadInfo:
        """Create the thread if missing. A thread id already owned by another resource raises."""

    async def aget_thread(self, resource_id: str, thread_id: str) -> ThreadInfo | None: ...

    async def aupdate_thread(
        self, resource_id: str, thread_id: str, *, title: str | None = None, metadata: Mapping[str, Any] | None = None
    ) -> ThreadInfo: ...

    async def alist_threads(
        self,
        resource_id: str,
        *,
        before: datetime | None = None,
        after: datetime | None = None,
        offset: int = 0,
        limit: int = 20,
    ) -> list[ThreadInfo]:
        """Threads of a resource, newest first."""

    async def alist_thread_summaries(
        self, resource_id: str | None, *, after: Any = None, limit: int = 20,
    ) -> list[Any]:
        """``ThreadSummary`` rows (title, message count, last activity), newest activity first,
        paged by key (``after`` = the last summary of the previous page); ``resource_id=None``
        lists the threads used without a resource. See ``store/thread_summaries.py``."""

    async def alist_thread_ids(self, resource_id: str, *, after_id: str | None = None, limit: int = 200) -> list[str]:
        """Ids of the resource's threads in code point order, starting after ``after_id``.

        Keyset paging: pass the last id of a page as ``after_id`` for the next one. Threads
        created or deleted between two pages never make another thread appear twice or be
        skipped (unlike OFFSET over a newest-first listing)."""

    async def adelete_thread(self, resource_id: str, thread_id: str) -> None:
        """Remove a thread, its messages and its thread-scope record, and forget the thread in the
        resource-scope record (its watermark, the groups that came only from it, its buffered
        work), in one transaction (explicit user action only)."""

    # messages
    async def aappend_messages(
        self, resource_id: str, thread_id: str, messages: Sequence[NewMessage]
    ) -> list[StoredMessage]:
        """Store new messages in order; ids already stored in this thread are skipped (idempotent).

        Returns only the rows that were inserted.
        """

    async def aget_messages(
        self,
        resource_id: str,
        thread_id: str,
        *,
        after_seq: int = 0,
        before_seq: int | None = None,
        limit: int | None = None,
        descending: bool = False,
    ) -> list[StoredMessage]:
        """Messages with ``after_seq < seq < before_seq``, oldest first unless ``descending``."""

    async def aget_message(self, resource_id: str, message_id: str) -> StoredMessage | None:
        """One message by id, only if it belongs to ``resource_id``."""

    async def aget_messages_by_ids(
        self, resource_id: str, thread_id: str, message_ids: Sequence[str]
    ) -> list[StoredMessage]:
        """The thread's messages among ``message_ids`` (any order; unknown ids are left out).

        A process's first step on a thread looks up only the ids its caller passes, never the
        whole history."""

    async def areplace_message(
        self, resource_id: str, thread_id: str, message_id: str, data: dict[str, Any], tokens: int
    ) -> bool:
        """Give an *unobserved* message new content (an edit the model and the Observer have not
        used yet). Returns False, changing nothing, when the message is missing or already observed."""

    async def acount_messages(self, resource_id: str, thread_id: str) -> int: ...

    async def alast_seq(self, resource_id: str, thread_id: str) -> int:
        """Highest ``seq`` in the thread (0 when empty)."""

    # records
    async def aget_record(self, resource_id: str, thread_id: str | None) -> OMRecord | None:
        """The record for a thread (``thread_id``) or resource scope (``None``)."""

    async def acommit_record(
        self,
        record: OMRecord,
        *,
        expected_version: int,
        mark_observed: Mapping[str, int] | None = None,
    ) -> OMRecord:
        """Write ``record`` if the stored version is still ``expected_version``, atomically with
        marking messages ``seq <= mark_observed[thread_id]`` of its resource observed.

        Returns the stored record (version incremented). Raises ``RecordConflictError`` otherwise;
        ``expected_version=0`` means "create; fail if it exists".
        """

    async def adelete_record(self, resource_id: str, thread_id: str | None) -> None: ...

    # small documents (working memory and similar), keyed per resource
    async def aget_value(self, resource_id: str, namespace: str, key: str) -> Any | None:
        """A JSON value stored under (resource, namespace, key), or None."""

    async def aput_value(self, resource_id: str, namespace: str, key: str, value: Any) -> None:
        """Store a JSON-serialisable value (replacing any previous one)."""

    async def aupdate_value(
        self, resource_id: str, namespace: str, key: str, update: ValueUpdate
    ) -> Any:
        """Store ``update(current)`` (``current`` is None when missing) as one atomic read-modify-write,
        so two concurrent updates (two fields merged into one document) both survive; returns
        the stored value. If ``update`` raises, or returns what JSON cannot hold, nothing is written."""

    # recall search: a keyword index written with the messages, and stored embeddings
    @property
    def keyword_search_available(self) -> bool:
        """Whether ``asearch_messages`` works here (a SQLite build without FTS5 has no index)."""

    async def asearch_messages(
        self, resource_id: str, query: str, *, thread_id: str | None = None, limit: int = 10
    ) -> list[SearchHit]:
        """Messages of the resource (of one thread when ``thread_id`` is given) containing any word
        of ``query``, most relevant first. The query is plain text: no character of it is syntax."""

    async def aput_vectors(self, resource_id: str, space: str, items: Sequence[VectorItem]) -> int:
        """Store embeddings of the resource's messages under ``space`` (the embedder's name);
        a message that has one in this space keeps it, a message of another resource is skipped.
        Returns how many were stored."""

    async def aget_vectors(
        self, resource_id: str, space: str, *, after_pos: int = 0, limit: int | None = None
    ) -> VectorBatch:
        """The resource's embeddings in ``space`` with ``pos > after_pos``, in ``pos`` order."""

    async def avector_stamp(self, resource_id: str, space: str) -> tuple[int, int]:
        """``(vectors ever deleted from the resource, highest pos in space)``, both read from an
        index (no count): a cache of the vectors is current while both are unchanged; a higher
        pos alone means rows were added after it."""


_THREAD_PAGE = 200


async def all_thread_ids(store: OMStore, resource_id: str) -> list[str]:
    """Every thread of the resource, paged by id (keyset): a thread created or deleted between
    two pages cannot make another one appear twice (and be observed twice) or be skipped."""
    ids: list[str] = []
    after: str | None = None
    while True:
        page = await store.alist_thread_ids(resource_id, after_id=after, limit=_THREAD_PAGE)
        ids.extend(page)
        if len(page) < _THREAD_PAGE:
            return ids
        after = page[-1]
