"""The pipeline state as JSON, and the compare-and-set rule every state store applies."""

from __future__ import annotations

from typing import Any

from dblog.core.acks import PipelineState
from dblog.core.dumps import DumpQueue, dump_from_json, dump_to_json
from dblog.core.positions import decode_position
from dblog.errors import FencedError, StateError


def check_fence(stored_version: int | None, stored_epoch: int, expected_version: int | None,
                epoch: int, where: str) -> None:
    """The compare-and-set rule of every state store: a write from an older leader epoch, or
    against a version other than the stored one, is refused with FencedError."""
    if epoch < stored_epoch:
        raise FencedError(f"state write with epoch {epoch} rejected: epoch {stored_epoch} "
                          f"owns {where}")
    if stored_version != expected_version:
        raise FencedError(f"state version is {stored_version}, expected {expected_version}: "
                          f"another writer changed {where}")


def state_to_json(state: PipelineState) -> dict[str, object]:
    return {
        "position": None if state.position is None else state.position.encode(),
        "seq": state.seq,
        "dumps": [dump_to_json(d) for d in state.dumps.dumps],
    }


def state_from_json(raw: dict[str, Any]) -> PipelineState:
    """The state in ``raw``; StateError saying what is wrong when it is not one (a damaged
    document gives no raw KeyError or TypeError)."""
    if not isinstance(raw, dict):
        raise StateError(f"the state is a {type(raw).__name__}, not an object")
    seq, dumps, position = raw.get("seq", 0), raw.get("dumps", []), raw.get("position")
    if type(seq) is not int or seq < 0:
        raise StateError(f"the state's seq is {seq!r}, not a count")
    if not isinstance(dumps, list):
        raise StateError(f"the state's dumps are a {type(dumps).__name__}, not a list")
    if position is not None and not isinstance(position, str):
        raise StateError(f"the state's position is {position!r}, not a string")
    try:
        queue = DumpQueue(tuple(dump_from_json(d) for d in dumps))
    except (KeyError, TypeError, ValueError, AttributeError, IndexError) as exc:
        raise StateError(f"a dump in the state is damaged ({type(exc).__name__}: {exc})") from exc
    return PipelineState(position=decode_position(position), seq=seq, dumps=queue)


def checked_document(doc: Any, where: str, fix: str, versioned: bool) -> dict[str, Any]:
    """``doc`` if it is a stored state document: ``{"version"?, "epoch", "data"}`` (a file
    keeps its version inside, a znode as its own version), with data that decodes. Otherwise
    one StateError "``where`` is damaged: ..." with ``fix``; a problem that is not damage (a
    position of a connector not installed) keeps its own fix."""
    problem = _envelope_problem(doc, versioned)
    if problem is None:
        try:
            state_from_json(doc["data"])
        except StateError as exc:
            if exc.fix is not None and "damaged" not in exc.message:
                raise StateError(f"{where}: {exc.message}", fix=exc.fix) from exc
            problem = exc.message
    if problem is not None:
        raise StateError(f"{where} is damaged: {problem}", fix=fix)
    checked: dict[str, Any] = doc
    return checked


def _envelope_problem(doc: Any, versioned: bool) -> str | None:
    if not isinstance(doc, dict):
        return f"a JSON {type(doc).__name__} where an object was expected"
    version, epoch = doc.get("version"), doc.get("epoch", 0)
    if versioned and (type(version) is not int or version < 0):
        return f"its version is {version!r}, not a count"
    if type(epoch) is not int:
        return f"its epoch is {epoch!r}, not a number"
    if not isinstance(doc.get("data"), dict):
        return "its data is missing or not an object"
    return None
