"""Publishes whose client names them on the version board itself (``kilorl.store.server.board``).

``board_claim`` makes a connection on the worker's host the one writer of some names' board
slots. ``publish_staged`` then stores versions whose bytes that client already wrote into
regions it allocated (``alloc`` tickets). The regions become the objects' storage: nothing
is copied and no payload travels. ``restage`` hands out the next regions in the same reply,
so a steady publisher allocates nothing on its own path. As with ``publish``, the items are
stored in order, and the first failure stops the rest and is the reply.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kilorl.store.errors import InvalidRequest
from kilorl.store.server.request import OpTable, Reply, arg
from kilorl.store.server.writes import finish_put, version_field, write_fields

if TYPE_CHECKING:
    from kilorl.store.server.worker import Connection, Worker

OPS = OpTable()
MAX_ITEMS = 4096


def _board(w: Worker, conn: Connection, op: str) -> Any:
    if not conn.same_host:
        raise InvalidRequest(f"{op}: only clients on the worker's host can write its arena and board")
    if w.board is None:
        raise InvalidRequest(f"{op}: this worker has no version board (Linux x86-64 only)")
    return w.board


@OPS.op("board_claim")
def board_claim(w: Worker, conn: Connection, h: dict[str, Any]) -> Reply:
    """``names``: this connection names their versions on the board from now on, until it ends."""
    board = _board(w, conn, "board_claim")
    names = arg(h, "names", list)
    if not names or len(names) > MAX_ITEMS or not all(isinstance(n, str) and n for n in names):
        raise InvalidRequest(f"names: must list 1 to {MAX_ITEMS} non-empty names")
    board.claim(conn.id, names)
    return Reply({"authoritative": w.version_book() is w.local_book})



@OPS.op("publish_staged")
def publish_staged(w: Worker, conn: Connection, h: dict[str, Any]) -> Reply:
    """``items`` = [[name, version, meta, ticket], ...]: versions whose bytes lie in this
    connection's allocations; ``restage``: reply with a new allocation of each item's size."""
    board = _board(w, conn, "publish_staged")
    items = arg(h, "items", list)
    restage = arg(h, "restage", bool, False)
    if not items or len(items) > MAX_ITEMS:
        raise InvalidRequest(f"items: must list 1 to {MAX_ITEMS} [name, version, meta, ticket], got {len(items)}")
    for i, item in enumerate(items):
        if not (isinstance(item, list) and len(item) == 4 and isinstance(item[0], str) and isinstance(item[2], dict)
                and isinstance(item[3], int) and not isinstance(item[3], bool)):
            raise InvalidRequest(f"items[{i}]: must be [name, version, meta, ticket], got {item!r}")
        if item[3] not in conn.allocs:
            raise InvalidRequest(f"items[{i}]: unknown allocation {item[3]}")
        if not isinstance(item[1], int) or isinstance(item[1], bool):
            raise InvalidRequest(f"items[{i}]: a staged publish names its version (the client names it on "
                                 "the board before the worker stores it)")
    if len({item[3] for item in items}) != len(items):
        raise InvalidRequest("items: an allocation is named twice")
    common = write_fields(w, {**{k: v for k, v in h.items() if k not in ("ver", "items")}, "meta": {}})
    if common["nx"]:
        raise InvalidRequest("nx: set-if-absent applies to keys, not to versions of a published name")
    names = [item[0] for item in items]
    sizes = [conn.allocs[item[3]].size for item in items]
    for name, _, _, ticket in items:  # the client may have named these regions already: keep them
        if board.claimed_by(name, conn.id):
            board.hold(name, conn.allocs[ticket])
    versions = []
    try:
        for i, (name, version, meta, ticket) in enumerate(items):
            f = {**common, "meta": meta, "ver": version_field(w, [name, version], f"items[{i}]")}
            region = conn.allocs.pop(ticket)
            versions.append(finish_put(w, "", region.size, region, f).header["version"])
    finally:
        board.sweep(names)
    reply: dict[str, Any] = {"versions": versions, "authoritative": w.version_book() is w.local_book}
    if restage:
        tickets = []
        for size in sizes:
            region = w.store.stage(size)
            ticket = conn.next_id()
            conn.allocs[ticket] = region
            tickets.append([ticket, region.offset])
        reply["tickets"] = tickets
    return Reply(reply)
