"""Ray's token authentication, as Ray ships it, without a warning the user cannot act on.

Ray 2.5x+ turns token authentication on by default for a new local cluster (``ray.init()``)
and says so on every start ("Token authentication is enabled for this Ray cluster. Set
RAY_AUTH_MODE=disabled to opt out"): a warning about a choice kiloRL made for the user, not
one the user has to act on. ``ray start --head`` turns it on too when a token exists
(``~/.ray/auth_token``, ``$RAY_AUTH_TOKEN`` or ``$RAY_AUTH_TOKEN_PATH``), but a driver that
connects to an explicit address (``kilorl train --address HEAD:PORT``) never does, so the
run would be refused by its own cluster.

``use_token_auth`` makes Ray's default explicit before ``ray.init``: token mode for an
embedded cluster (Ray generates the token if there is none, as it would), and for an
explicit address whenever a token is there to present. A ``RAY_AUTH_MODE`` the user set is
always left as it is. Ray reads the mode once per process, so where Ray is already imported
its configuration is read again (what Ray's own switch to token mode does).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

AUTH_MODE_ENV = "RAY_AUTH_MODE"


def token_available() -> bool:
    """Whether this machine has a Ray token to present (where Ray itself looks for one)."""
    if os.environ.get("RAY_AUTH_TOKEN"):
        return True
    path = os.environ.get("RAY_AUTH_TOKEN_PATH")
    return Path(path).is_file() if path else (Path.home() / ".ray" / "auth_token").is_file()


def use_token_auth(embedded: bool) -> bool:
    """Set ``RAY_AUTH_MODE=token`` for this process and its children where Ray would use token
    authentication anyway (``embedded``: a new local cluster; else: a token is available).
    Returns whether it did; a mode the user set is never changed."""
    if AUTH_MODE_ENV in os.environ or not (embedded or token_available()):
        return False
    os.environ[AUTH_MODE_ENV] = "token"
    if "ray._raylet" in sys.modules:  # the mode was read at import: read it again
        from ray._raylet import Config

        Config.initialize("")
    return True
