"""The parameter-sync benchmark's pacing (benchmarks/param_sync_bench.py) stops on a failed reader.

The driver publishes version v+1 only after every reader acknowledged v through a FIFO. A
reader that raised never acknowledges, and its open end of the FIFO keeps the read from
seeing EOF: before this check existed the two-raylet run hung there. These specify that the
wait ends with the reader's own error, or with a deadline error, never by waiting forever.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.benchmarks.bench_modules import load_bench

bench = load_bench("param_sync_bench")


@pytest.fixture
def acks(tmp_path: Path) -> Iterator[tuple[object, int]]:
    """The driver's ``Acks`` and one reader's open write end."""
    a = bench.Acks(tmp_path / "acks")
    writer = os.open(a.path, os.O_WRONLY)
    yield a, writer
    try:
        os.close(writer)
    except OSError:
        pass
    a.close()


def fine() -> None:
    """A ``check`` whose readers are all still listening."""


def test_every_reader_acknowledging_ends_the_wait(acks) -> None:
    a, writer = acks
    os.write(writer, b"vvv")
    a.wait(3, deadline_s=600, check=fine)  # returns as soon as the three acks are in


def test_a_reader_that_raised_stops_the_wait_with_its_own_error(acks) -> None:
    a, writer = acks
    os.write(writer, b"v")  # one of two readers acknowledged

    def failed() -> None:
        raise ValueError("reader 1: version 3 not readable")

    with pytest.raises(ValueError, match="reader 1: version 3"):
        a.wait(2, deadline_s=600, check=failed, check_every_s=0.01)


def test_readers_that_all_closed_the_pipe_stop_the_wait(acks) -> None:
    a, writer = acks
    os.close(writer)  # what the kernel does when every reader's process dies
    with pytest.raises(bench.ReaderFailed, match="closed the ack pipe after 0/2"):
        a.wait(2, deadline_s=600, check=fine)


def test_readers_silent_past_the_deadline_stop_the_wait_naming_the_setting(acks) -> None:
    a, _ = acks
    with pytest.raises(bench.ReaderFailed, match=r"0/2 readers acknowledged version 4 .*--sync-timeout-s"):
        a.wait(2, deadline_s=0.05, check=fine, what="version 4", check_every_s=0.01)


class FakeRay:
    """``ray.wait`` / ``ray.get`` over refs that are already-finished results or errors."""

    def __init__(self, finished: dict[str, object]) -> None:
        self.finished = finished

    def wait(self, refs: list[str], num_returns: int, timeout: float) -> tuple[list[str], list[str]]:
        return [r for r in refs if r in self.finished], [r for r in refs if r not in self.finished]

    def get(self, ref: str) -> object:
        result = self.finished[ref]
        if isinstance(result, Exception):
            raise result
        return result


def test_readers_alive_reraises_a_listen_that_failed_and_passes_while_all_listen() -> None:
    bench.readers_alive(FakeRay({}), ["r0", "r1"])()  # nobody finished: all still listening
    with pytest.raises(TimeoutError, match="wait_version"):
        bench.readers_alive(FakeRay({"r1": TimeoutError("wait_version timed out")}), ["r0", "r1"])()
    with pytest.raises(bench.ReaderFailed, match="returned before every version"):
        bench.readers_alive(FakeRay({"r0": []}), ["r0", "r1"])()
