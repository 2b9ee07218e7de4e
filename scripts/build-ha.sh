#!/usr/bin/env bash
# Builds the stores scripts/ha-up.sh runs into a per-version cache, only
# when they are missing: etcd (the server main of the release the
# orchestrator embeds) and a standalone FerretDB (the embedded version,
# SQLite backend). Runs under flock so parallel builds never race on the
# cache. Prints the directory holding the binaries.
set -euo pipefail

ETCD_VERSION=v3.6.4
FERRETDB_VERSION=v1.24.0
root=$(cd "$(dirname "$0")/.." && pwd)
cache=${ARGUS_CACHE_DIR:-$HOME/.cache/argus}
bin=$cache/ha-etcd-$ETCD_VERSION-ferretdb-$FERRETDB_VERSION/bin
mkdir -p "$bin"

exec 9>"$cache/build.lock"
flock 9

build() { # name, package
  if [ -x "$bin/$1" ]; then return; fi
  local start
  start=$(date +%s)
  echo "ha: building $1 (cold build: a minute or two)..." >&2
  (cd "$root/scripts/hatools" && CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$bin/$1.tmp" "$2")
  mv "$bin/$1.tmp" "$bin/$1"
  echo "ha: built $1 in $(( $(date +%s) - start ))s" >&2
}
build etcd go.etcd.io/etcd/server/v3
build ferretdb ./ferretdb
echo "$bin"
