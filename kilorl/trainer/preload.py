"""The driver's torch import, done once on a background thread after the roles are up.

The driver needs torch only for checkpoints (unpickling the learner's state, safetensors)
and TensorBoard. Importing it in the background keeps it off the start-up path; importing
it from two threads at once crashes torch ("partially initialized module"), so every
user of torch on the driver calls ``wait()`` first and only this thread imports it.
"""

from __future__ import annotations

import threading

_lock = threading.Lock()
_thread: threading.Thread | None = None


def _import() -> None:
    import safetensors.torch  # noqa: F401 - the import is the point (it imports torch)


def start() -> None:
    """Begin importing torch in the background (once per process)."""
    global _thread
    with _lock:
        if _thread is None:
            _thread = threading.Thread(target=_import, name="kilorl-preload", daemon=True)
            _thread.start()


def wait() -> None:
    """Return once torch is importable without racing the background import."""
    start()
    assert _thread is not None
    _thread.join()
