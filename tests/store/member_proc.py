"""A cluster member in its own process, for membership tests.

Usage: python member_proc.py METASTORE_URL MEMBER_ID PREFIX LEASE_TTL
Joins, prints ``JOINED <epoch>``, then leaves gracefully when stdin closes
(or dies with the test's ``kill -9``, which is the point of some tests).
"""

from __future__ import annotations

import sys

from kilorl.store.mesh.membership import MemberInfo, Membership, MembershipConfig
from kilorl.store.metastore import open_metastore


def main() -> int:
    url, member_id, prefix, ttl = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
    store = open_metastore(url)
    member = Membership(store, MemberInfo(member_id, f"127.0.0.1:{member_id}"), MembershipConfig(prefix, ttl))
    state = member.join()
    print(f"JOINED {state.epoch}", flush=True)
    sys.stdin.read()  # until the parent closes our stdin
    member.leave()
    store.close()
    print("LEFT", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
