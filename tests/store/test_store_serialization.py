"""Value encoding without a worker: layouts, views, and the device-side decoder."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from kilorl.store import InvalidRequest
from kilorl.store.local.arena import Allocator
from kilorl.store.wire.codec import decode, decode_device, encode


def payload_of(value) -> tuple[dict, bytearray]:
    enc = encode(value)
    buf = bytearray(enc.nbytes)
    enc.write_into(memoryview(buf))
    assert b"".join(bytes(b) for b in enc.buffers()) == bytes(buf)  # socket and arena layouts agree
    return enc.meta, buf


def test_a_list_of_byte_chunks_of_any_format_is_stored_as_their_bytes_end_to_end():
    floats = np.arange(3, dtype=np.float32)
    chunks = [memoryview(b"abc"), bytearray(b"de"), memoryview(floats), memoryview(b"0123456789")[2:5]]
    meta, buf = payload_of(chunks)
    assert meta == {"k": "bytes"}
    assert bytes(buf) == b"abcde" + floats.tobytes() + b"234"
    with pytest.raises(InvalidRequest, match=r"value\[1\]: a byte chunk must be contiguous"):
        encode([b"ok", memoryview(b"abcdef")[::2]])


def test_dict_entries_are_aligned_views():
    value = {"a": np.arange(3, dtype=np.int8), "b": torch.randn(5, 3), "c": b"xyz"}
    meta, buf = payload_of(value)
    assert all(off % 64 == 0 for *_, off, _n in meta["e"])
    got = decode(meta, memoryview(buf))
    assert np.shares_memory(got["a"], np.frombuffer(buf, dtype=np.uint8))
    assert torch.equal(got["b"], value["b"]) and bytes(got["c"]) == b"xyz"


def test_decode_device_keeps_tensors_as_tensor_views():
    # The CUDA IPC reader decodes from a flat uint8 device tensor; on CPU the same code runs.
    value = {"w": torch.randn(4, 8), "h": torch.arange(6, dtype=torch.int16), "n": np.ones(3), "raw": b"ab"}
    meta, buf = payload_of(value)
    flat = torch.frombuffer(buf, dtype=torch.uint8)
    got = decode_device(meta, flat)
    assert torch.equal(got["w"], value["w"]) and got["w"].data_ptr() == flat[meta["e"][0][4]:].data_ptr()
    assert torch.equal(got["h"], value["h"])
    assert np.array_equal(got["n"], value["n"]) and bytes(got["raw"]) == b"ab"
    meta, buf = payload_of(torch.randn(3, 3))
    assert torch.equal(decode_device(meta, torch.frombuffer(buf, dtype=torch.uint8)),
                       decode(meta, memoryview(buf)))


def test_unsupported_values_name_the_problem():
    with pytest.raises(InvalidRequest, match=r"value\['x'\]"):
        encode({"x": object()})
    with pytest.raises(InvalidRequest, match="dict keys"):
        encode({1: b"x"})


def test_allocator_coalesces_and_reuses():
    a = Allocator(1024)
    offs = [a.alloc(100) for _ in range(8)]
    assert None not in offs and a.alloc(200) is None
    for o in offs[2:5]:
        a.free(o)
    assert a.alloc(300) == offs[2]  # three freed neighbours merged into one block
    for o in offs[:2] + offs[5:]:
        a.free(o)
    a.free(offs[2])
    assert a.used_bytes == 0 and a.largest_free() == 1024
