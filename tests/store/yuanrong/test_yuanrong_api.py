"""The module tree mirrors openYuanrong's, and errors are both kinds at once."""

from __future__ import annotations

import importlib

import pytest

from kilorl import store
from kilorl.store import yuanrong
from kilorl.store.yuanrong import errors
from kilorl.store.yuanrong.util import Context, Status, Validator

MODULES = {
    "ds_client": ["DsClient"],
    "kv_client": ["KVClient", "ExistenceOpt", "ReadParam", "SetParam", "ReadOnlyBuffer"],
    "object_client": ["ObjectClient", "Buffer", "WriteMode", "ConsistencyType", "CacheType"],
    "stream_client": ["StreamClient", "SubconfigType", "Producer", "Consumer"],
    "hetero_client": ["HeteroClient", "Blob", "DeviceBlobList", "MetaInfo", "Future"],
    "ds_tensor_client": ["DsTensorClient", "CopyRange"],
    "util": ["Context", "Status", "Validator"],
}


@pytest.mark.parametrize("module", sorted(MODULES))
def test_every_openyuanrong_module_exists_with_its_names(module):
    mod = importlib.import_module(f"kilorl.store.yuanrong.{module}")
    for name in MODULES[module]:
        assert hasattr(mod, name), f"{module}.{name}"


def test_the_package_root_exports_openyuanrongs_all():
    for name in ["Buffer", "ConsistencyType", "DsClient", "HeteroClient", "ObjectClient", "KVClient", "Status",
                 "StreamClient", "SubconfigType", "WriteMode", "Context", "FutureTimeoutException", "Blob",
                 "DeviceBlobList", "DsTensorClient", "CopyRange", "MetaInfo", "Future"]:
        assert name in yuanrong.__all__ and getattr(yuanrong, name) is not None


def test_write_modes_include_the_evict_variants():
    names = {m.name for m in yuanrong.WriteMode}
    assert names == {"NONE_L2_CACHE", "WRITE_THROUGH_L2_CACHE", "WRITE_BACK_L2_CACHE", "NONE_L2_CACHE_EVICT",
                     "WRITE_BACK_L2_CACHE_EVICT"}


@pytest.mark.parametrize("native, compat", [
    (store.KeyNotFound, errors.DsKeyNotFound), (store.StoreTimeout, errors.DsTimeout),
    (store.ConnectionLost, errors.DsConnectionError), (store.StoreFullError, errors.DsFullError),
    (store.AuthError, errors.DsAuthError), (store.InvalidRequest, errors.DsInvalidArgument),
    (store.VersionGone, errors.DsVersionGone), (store.ObjectLost, errors.DsObjectLost),
    (store.StoreError, errors.DsRuntimeError)])
def test_native_errors_convert_to_runtime_errors_of_the_same_kiloRL_class(native, compat):
    converted = errors.convert(native("boom"))
    assert type(converted) is compat
    assert isinstance(converted, RuntimeError) and isinstance(converted, native)
    assert "boom" in str(converted) and str(converted).startswith("code: [")


def test_type_errors_are_also_invalid_requests_and_socket_errors_runtime_errors():
    with pytest.raises(TypeError) as info:
        Validator.check_args_types([["flag", 1, bool]])
    assert isinstance(info.value, store.InvalidRequest) and "flag" in str(info.value)
    with pytest.raises(TypeError):
        Validator.check_args_types([["port", True, int]])  # exact types: a bool is not an int
    assert isinstance(errors.convert(ConnectionRefusedError("refused")), RuntimeError)
    assert issubclass(errors.FutureTimeoutException, RuntimeError)


def test_status_and_trace_ids():
    assert Status().is_ok() and Status(False, "bad").to_string() == "bad"
    Context.set_trace_id("trace-1")
    assert Context.trace_id() == "trace-1"
    with pytest.raises(RuntimeError):
        Context.set_trace_id("x" * 37)
    with pytest.raises(TypeError):
        Context.set_trace_id(1)
