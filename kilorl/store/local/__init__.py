"""One worker's data, with no sockets: arena allocator, object table, tiers, L2, versions, streams."""
