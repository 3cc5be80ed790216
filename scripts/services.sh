#!/usr/bin/env bash
# Installs the Debian packages the test suite needs (etcd for the store's metastore
# tests, redis for benchmarks, prometheus and promtool for the monitor's tests).
# Idempotent: does nothing when they are present.
set -euo pipefail
need=()
command -v etcd >/dev/null 2>&1 || need+=(etcd-server)
command -v redis-server >/dev/null 2>&1 || need+=(redis-server)
{ command -v prometheus && command -v promtool; } >/dev/null 2>&1 || need+=(prometheus)
if [ ${#need[@]} -gt 0 ]; then
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
echo "services: etcd $(command -v etcd || echo missing), redis-server $(command -v redis-server || echo missing), prometheus $(command -v prometheus || echo missing)"
