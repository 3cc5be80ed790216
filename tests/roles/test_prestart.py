"""A prestarted worker's import of the roles: collector paused during it, always back on after."""

from __future__ import annotations

import gc
import sys

import pytest

from kilorl.roles import prestart


@pytest.fixture
def unfrozen():
    yield
    gc.unfreeze()  # the freeze is for a worker process; give this test process its heap back


def test_importing_the_roles_freezes_what_they_created_and_leaves_the_collector_on(unfrozen):
    gc.unfreeze()
    prestart.import_roles()
    assert gc.isenabled()
    assert gc.get_freeze_count() > 0
    assert "kilorl.roles.env_runner" in sys.modules and "kilorl.roles.learner" in sys.modules


def test_a_failed_import_still_turns_the_collector_back_on(monkeypatch, unfrozen):
    monkeypatch.setitem(sys.modules, "kilorl.roles.learner", None)  # None in sys.modules: ImportError
    with pytest.raises(ImportError):
        prestart.import_roles()
    assert gc.isenabled()


def test_a_caller_that_paused_the_collector_finds_it_paused_after(unfrozen):
    gc.disable()
    try:
        prestart.import_roles()
        assert not gc.isenabled()
    finally:
        gc.enable()
