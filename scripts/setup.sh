#!/usr/bin/env bash
# Installs what dblog's demo, tests and benchmarks need on a fresh Debian machine. Idempotent.
# Debian packages need root: run as root, or with sudo available.
set -euo pipefail
cd "$(dirname "$0")/.."

# zookeeper ships the jars only (zookeeperd would add a system service); the harness starts its own
# mariadb-server: the MariaDB test harness; pkg-config and libmariadb-dev build mysqlclient;
# gcc builds mysqlclient and dblog's compiled row decoder (connectors/mysql/_rowimage.c);
# maven fetches the Java artifacts below
# chromium and chromium-driver: the status page's browser test (never downloaded at test time)
PACKAGES=(postgresql-15 postgresql-15-wal2json zookeeper default-jre-headless mariadb-server
          pkg-config libmariadb-dev gcc maven chromium chromium-driver)
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

# Java artifacts from Maven Central, pinned in scripts/java/<name>/pom.xml: the Apache Kafka test
# broker (kafka) and Spark's Delta and Kafka connectors (spark). Each pom's jars and their
# dependencies are copied into $DBLOG_JARS_DIR/<name> (default ~/.cache/dblog/jars), which the
# harness reads; a folder is fetched again only when its pom changed (checksum stamp).
JARS_DIR="${DBLOG_JARS_DIR:-$HOME/.cache/dblog/jars}"
for pom in scripts/java/*/pom.xml; do
  name="$(basename "$(dirname "$pom")")"
  dest="$JARS_DIR/$name"
  stamp="$(sha256sum "$pom" | cut -d' ' -f1)"
  if [ "$(cat "$dest/.pom.sha256" 2>/dev/null)" = "$stamp" ]; then continue; fi
  echo "setup: fetching the $name jars into $dest" >&2
  rm -rf "$dest.partial"
  mkdir -p "$JARS_DIR"
  if ! mvn -B -Dstyle.color=never -f "$pom" dependency:copy-dependencies \
       -DoutputDirectory="$dest.partial" > "$JARS_DIR/$name.mvn.log" 2>&1; then
    tail -n 40 "$JARS_DIR/$name.mvn.log" >&2
    echo "setup: mvn could not fetch the $name jars (log: $JARS_DIR/$name.mvn.log)" >&2
    exit 1
  fi
  echo "$stamp" > "$dest.partial/.pom.sha256"
  rm -rf "$dest"
  mv "$dest.partial" "$dest"
done

PYTHON="${PYTHON:-python3}"
"$PYTHON" -m pip install --quiet --disable-pip-version-check -e ".[test]"
echo "setup: done" >&2
