"""Reading the memory a LangGraph checkpoint names, for inspection after time travel.

A thread's OM id shows its newest branch only by accident: after a fork, ``get_record(thread_id)``
is the memory of the thread's original line, while the checkpoint the fork's model ran from
names another OM branch (``state["om_position"]``, see ``branches.py``). Given the checkpoint
(its state, a ``StateSnapshot`` from ``graph.get_state(config)``, or a checkpoint config plus
the checkpointer or the compiled graph), this module finds that position and reads the record
exactly as that checkpoint saw it: the snapshot stored for its record version, or kept in this
process for a run without a checkpointer (``branches.load_snapshot``), or the branch's record
while it is still at that version. Anything else (a run without a checkpointer, read from another
process) is an error saying so, never the newest memory shown as if it were the checkpoint's.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..store.base import OMRecord
from .branches import POSITION_KEY, Position, branch_root, check_resource, load_snapshot
from .host import MemoryHost


class CheckpointPositionError(ValueError):
    """The checkpoint given for inspection names no OM position."""


async def aposition_at(checkpoint: Any, checkpointer: Any = None) -> Position:
    """The OM position a checkpoint names.

    ``checkpoint``: a ``StateSnapshot``, a state mapping holding ``om_position``, the position
    itself, or a checkpoint config (``{"configurable": {"thread_id", "checkpoint_id"}}``) with
    ``checkpointer`` (a checkpoint saver, or a compiled graph that has one)."""
    values: Any = None if isinstance(checkpoint, Mapping) else getattr(checkpoint, "values", None)  # StateSnapshot
    if isinstance(checkpoint, Mapping):
        if "configurable" in checkpoint:
            values = await _state_of_config(checkpoint, checkpointer)
        elif "branch" in checkpoint:
            values = {POSITION_KEY: checkpoint}
        else:
            values = checkpoint
    if not isinstance(values, Mapping):
        raise CheckpointPositionError(
            f"checkpoint: expected a StateSnapshot, a state, an om_position or a checkpoint config, "
            f"got {type(checkpoint).__name__}")
    position = Position.from_state(values.get(POSITION_KEY))
    if position is None:
        raise CheckpointPositionError(
            f"checkpoint: its state has no {POSITION_KEY!r} (a checkpoint before OM's first step, or "
            "a graph without OM)")
    return position


async def _state_of_config(config: Mapping[str, Any], checkpointer: Any) -> Mapping[str, Any]:
    if checkpointer is None:
        raise CheckpointPositionError(
            "checkpointer: a checkpoint config needs the checkpointer (or the compiled graph) to read it")
    aget_state = getattr(checkpointer, "aget_state", None)
    if aget_state is not None:  # a compiled graph
        try:
            snapshot = await aget_state(dict(config))
        except NotImplementedError:  # on a sync-only saver (SqliteSaver)
            snapshot = checkpointer.get_state(dict(config))
        values: Mapping[str, Any] = snapshot.values or {}
        return values
    saver = getattr(checkpointer, "checkpointer", checkpointer)
    try:
        found = await saver.aget_tuple(dict(config))
    except NotImplementedError:  # a sync-only saver (SqliteSaver)
        found = saver.get_tuple(dict(config))
    if found is None:
        raise CheckpointPositionError(f"checkpoint: no checkpoint for {dict(config.get('configurable') or {})}")
    channel_values: Mapping[str, Any] = found.checkpoint.get("channel_values") or {}
    return channel_values


async def arecord_at(om: MemoryHost, thread_id: str, resource_id: str | None,
                     position: Position) -> tuple[str, str, OMRecord]:
    """``(resolved resource, branch, record)`` as the checkpoint at ``position`` saw them."""
    if branch_root(position.branch) != thread_id:
        raise CheckpointPositionError(
            f"checkpoint: it belongs to thread {branch_root(position.branch)!r}, not {thread_id!r}")
    resource = check_resource(thread_id, resource_id, position)
    resolved = om.resolve_resource(position.branch, resource)
    await om.aensure_setup()
    record = await om.aload_record(resolved, position.branch)
    if position.record is None or position.version is None:
        return resolved, position.branch, record.model_copy(deep=True)
    snapshot = await load_snapshot(om, resolved, position)
    if snapshot is not None:
        return resolved, position.branch, snapshot.model_copy(deep=True)
    if record.id == position.record and record.version == position.version:
        return resolved, position.branch, record.model_copy(deep=True)  # the branch has not moved since
    # the newest record is not the state's: showing it as the checkpoint's memory would mislead
    raise CheckpointPositionError(
        f"checkpoint: the memory it names (record {position.record!r} version {position.version}) is not "
        f"available here; the branch is at version {record.version} now. A run without a checkpointer "
        "keeps those snapshots only in the process that ran it (its last 64 record versions)")
