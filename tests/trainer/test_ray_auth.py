"""Ray's token authentication made explicit before ``ray.init``, never against the user's setting."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.conftest import REPO

PROBE = ("import os, sys; from kilorl.trainer.ray_auth import use_token_auth; "
         "did = use_token_auth(embedded=sys.argv[1] == 'embedded'); print(did, os.environ.get('RAY_AUTH_MODE'))")


def probe(kind: str, tmp_path, **env: str) -> str:
    base = {k: v for k, v in os.environ.items() if not k.startswith("RAY_AUTH")}
    base["HOME"] = str(tmp_path)  # no ~/.ray/auth_token unless a case makes one
    out = subprocess.run([sys.executable, "-c", PROBE, kind], capture_output=True, text=True, timeout=60, cwd=REPO,
                         env={**base, **env})
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_an_embedded_cluster_uses_token_authentication_as_ray_would_but_says_so_itself(tmp_path):
    assert probe("embedded", tmp_path) == "True token"


@pytest.mark.parametrize("mode", ["disabled", "token"])
def test_a_mode_the_user_set_is_left_as_it_is(tmp_path, mode):
    assert probe("embedded", tmp_path, RAY_AUTH_MODE=mode) == f"False {mode}"


def test_a_driver_joining_a_cluster_presents_a_token_only_where_there_is_one(tmp_path):
    assert probe("address", tmp_path) == "False None"  # no token anywhere: connect as Ray does
    (tmp_path / "tok").write_text("secret")
    assert probe("address", tmp_path, RAY_AUTH_TOKEN_PATH=str(tmp_path / "tok")) == "True token"
    assert probe("address", tmp_path, RAY_AUTH_TOKEN="secret") == "True token"
    (tmp_path / ".ray").mkdir()
    (tmp_path / ".ray" / "auth_token").write_text("secret")  # where `ray get-auth-token --generate` puts it
    assert probe("address", tmp_path) == "True token"
