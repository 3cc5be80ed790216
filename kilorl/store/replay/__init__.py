"""Replay tables: fixed-schema rows kept in chunks, sampled uniformly or by priority.

RL-agnostic (a row is named columns of fixed shape and dtype); the worker serves the tables
(``kilorl.store.server.replay_ops``) and the client encodes chunks and decodes samples
(``kilorl.store.client.replay``). Only ``spec`` and ``codec`` are shared by both sides.
"""
