"""The store's wire: framing, value codec, peer connections, the shared-memory arena mapping.

Bottom layer (docs/architecture.md, "Layers"): imports nothing of the store but errors.
"""
