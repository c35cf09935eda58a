"""How a listing of memories is ordered, the same on both backends."""

from __future__ import annotations

from memory_server.storage.records import BY_CREATED, BY_OCCURRED

# occurred_at and created_at are stored normalised (UTC, microseconds, Z; COLLATE "C" on PostgreSQL), so text
# order is time order; each has an index on (site_id, column).
ORDER_COLUMNS = {BY_OCCURRED: "occurred_at", BY_CREATED: "created_at"}


def order_column(order: str) -> str:
    """The column a listing in `order` is keyed on (with id as the tie-break)."""
    try:
        return ORDER_COLUMNS[order]
    except KeyError:
        raise ValueError(f"unknown listing order {order!r}") from None
