#!/usr/bin/env bash
# Installs what dblog's demo, tests and benchmarks need on a fresh Debian machine. Idempotent.
# Debian packages need root: run as root, or with sudo available.
set -euo pipefail
cd "$(dirname "$0")/.."

# zookeeper ships the jars only (zookeeperd would add a system service); the harness starts its own
# mariadb-server: the MariaDB test harness; pkg-config and libmariadb-dev build mysqlclient
PACKAGES=(postgresql-15 postgresql-15-wal2json zookeeper default-jre-headless mariadb-server
          pkg-config libmariadb-dev)
SUDO=""
if [ "$(id -u)" != "0" ]; then SUDO="sudo"; fi

missing=()
for pkg in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if [ "${#missing[@]}" -gt 0 ]; then
  echo "setup: installing ${missing[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  # the package's post-install would create and start a default cluster; the harness makes its own
  $SUDO mkdir -p /etc/postgresql-common/createcluster.d
  echo "create_main_cluster = false" | $SUDO tee /etc/postgresql-common/createcluster.d/dblog.conf >/dev/null
  # keep package scripts from starting system services (mariadb-server would start a server on
  # port 3306); the harness starts its own servers. Only when no policy is in place already.
  policy=""
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' | $SUDO tee /usr/sbin/policy-rc.d >/dev/null
    $SUDO chmod +x /usr/sbin/policy-rc.d
    policy=1
  fi
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
  if [ -n "$policy" ]; then $SUDO rm -f /usr/sbin/policy-rc.d; fi
fi

PYTHON="${PYTHON:-python3}"
"$PYTHON" -m pip install --quiet --disable-pip-version-check -e ".[test]"
echo "setup: done" >&2
