#!/usr/bin/env bash
# Usage: scripts/ha-up.sh --replicas N --dir DIR [-- ORCHESTRATOR FLAGS]
#
# Runs Argus highly available on this machine, on loopback only: a
# three-member etcd cluster (the release the orchestrator embeds), one
# standalone FerretDB (the embedded version, SQLite backend) and N
# orchestrator replicas pointed at them, each on a free port, with the
# flags after "--" passed to every replica. The stores are built once into
# ~/.cache/argus (scripts/build-ha.sh); the orchestrator is built into
# DIR/bin unless ARGUS_ORCHESTRATOR names a binary.
#
# Once every replica answers /readyz it writes DIR/replicas (one line per
# replica: "URL PID", and its --debug-listen address third when
# ARGUS_HA_DEBUG=1, which also runs etcd with --enable-pprof), DIR/stores (one line per store process: "NAME URL
# PID", the etcd members e1..e3 and ferretdb, for tests that fail them)
# and then DIR/ready. It stays in the foreground, and
# on SIGTERM or SIGINT stops the replicas, then the stores, and exits.
# Replicas are named r1..rN (--replica-id); logs are in DIR/logs. Each run
# starts afresh: the stores' data under DIR is removed first.
# ARGUS_HA_TLS_CA=FILE: the replicas serve HTTPS (--tls-cert-file and
# --tls-key-file among the flags after "--"), verified by FILE; their
# URLs are https. ARGUS_HA_REPLICA_GOGC=N sets GOGC for the replicas only.
set -euo pipefail

usage() {
  sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2
  exit 2
}

replicas=3
dir=
while [ $# -gt 0 ]; do
  case $1 in
    --replicas) [ $# -ge 2 ] || usage; replicas=$2; shift 2 ;;
    --replicas=*) replicas=${1#*=}; shift ;;
    --dir) [ $# -ge 2 ] || usage; dir=$2; shift 2 ;;
    --dir=*) dir=${1#*=}; shift ;;
    --) shift; break ;;
    -h | --help) usage ;;
    *) echo "ha-up: unknown argument $1" >&2; usage ;;
  esac
done
[ -n "$dir" ] || usage
[[ $replicas =~ ^[1-9][0-9]?$ ]] || { echo "ha-up: --replicas must be 1 to 99" >&2; exit 2; }

root=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)
rm -rf "$dir/ready" "$dir/replicas" "$dir/stores" "$dir"/etcd? "$dir/ferretdb" "$dir"/orch* "$dir/logs"
mkdir -p "$dir/logs"

log() { echo "ha-up: $*" >&2; }

pids=() # everything started, in start order: 3 etcd, FerretDB, replicas

# stop ends the processes in groups, newest first, each with SIGTERM and,
# after 30 s, SIGKILL.
stop_group() {
  local p
  for p in "$@"; do kill -TERM "$p" 2>/dev/null || true; done
  for p in "$@"; do
    for _ in $(seq 300); do
      kill -0 "$p" 2>/dev/null || break
      sleep 0.1 # polling with a deadline
    done
    kill -KILL "$p" 2>/dev/null || true
    wait "$p" 2>/dev/null || true
  done
}
stopping=
stop() {
  local code=$?
  [ -z "$stopping" ] || return
  stopping=1
  # Further SIGTERMs are ignored, not fatal, until everything is stopped: a
  # test that started this script with a death signal and died sends one
  # per thread of its process as each exits (Linux reparents to the next),
  # and the second would kill the script between its replicas and stores.
  trap '' TERM INT
  trap - EXIT
  if [ ${#pids[@]} -gt 4 ]; then stop_group "${pids[@]:4}"; fi
  if [ ${#pids[@]} -gt 3 ]; then stop_group "${pids[3]}"; fi
  if [ ${#pids[@]} -gt 0 ]; then stop_group "${pids[@]:0:3}"; fi
  rm -f "$dir/ready"
  log "stopped"
  exit "$code"
}
trap stop EXIT
trap 'exit 0' TERM INT

# port sets REPLY to a free loopback port below the kernel's ephemeral range
# (so no outgoing connection takes it meanwhile), not handed out before.
taken=" "
port() {
  local p
  while :; do
    p=$((20000 + RANDOM % 12000))
    case $taken in *" $p "*) continue ;; esac
    if (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then continue; fi
    taken="$taken$p "
    REPLY=$p
    return
  done
}

# wait_for polls a command until it succeeds (deadline in seconds), failing
# early if the process it waits for died.
wait_for() { # what, seconds, pid, command...
  local what=$1 secs=$2 pid=$3
  shift 3
  local deadline=$((SECONDS + secs))
  until "$@" >/dev/null 2>&1; do
    if ! kill -0 "$pid" 2>/dev/null; then
      log "$what exited; its log:"
      return 1
    fi
    if [ $SECONDS -ge $deadline ]; then
      log "$what not ready after ${secs}s"
      return 1
    fi
    sleep 0.2 # polling with a deadline
  done
}

stores=$("$root/scripts/build-ha.sh")
orch=${ARGUS_ORCHESTRATOR:-}
if [ -z "$orch" ]; then
  log "building the orchestrator..."
  (cd "$root" && CGO_ENABLED=0 go build -trimpath -o "$dir/bin/orchestrator" ./src/cmd/orchestrator)
  orch=$dir/bin/orchestrator
fi

# etcd: three members.
declare -a client peer
cluster=
for i in 1 2 3; do
  port; client[i]=$REPLY
  port; peer[i]=$REPLY
  cluster="${cluster:+$cluster,}e$i=http://127.0.0.1:${peer[i]}"
done
endpoints=
for i in 1 2 3; do
  "$stores/etcd" --name "e$i" --data-dir "$dir/etcd$i" \
    --listen-client-urls "http://127.0.0.1:${client[i]}" --advertise-client-urls "http://127.0.0.1:${client[i]}" \
    --listen-peer-urls "http://127.0.0.1:${peer[i]}" --initial-advertise-peer-urls "http://127.0.0.1:${peer[i]}" \
    --initial-cluster "$cluster" --initial-cluster-state new --initial-cluster-token argus-ha \
    --auto-compaction-mode periodic --auto-compaction-retention 1h --log-level warn \
    $([ "${ARGUS_HA_DEBUG:-}" = 1 ] && echo --enable-pprof) \
    >"$dir/logs/etcd$i.log" 2>&1 &
  pids+=($!)
  endpoints="${endpoints:+$endpoints,}http://127.0.0.1:${client[i]}"
done
for i in 1 2 3; do
  wait_for "etcd member e$i" 60 "${pids[i - 1]}" curl -fsS "http://127.0.0.1:${client[i]}/health" ||
    { tail -20 "$dir/logs/etcd$i.log" >&2; exit 1; }
done
log "etcd cluster up: $endpoints"

# FerretDB.
port; mongo=$REPLY
"$stores/ferretdb" --listen-addr "127.0.0.1:$mongo" --sqlite-dir "$dir/ferretdb" >"$dir/logs/ferretdb.log" 2>&1 &
pids+=($!)
wait_for FerretDB 60 "${pids[3]}" bash -c "exec 3<>/dev/tcp/127.0.0.1/$mongo" ||
  { tail -20 "$dir/logs/ferretdb.log" >&2; exit 1; }
log "FerretDB up: mongodb://127.0.0.1:$mongo/"

# The replicas.
scheme=http
curl_tls=()
if [ -n "${ARGUS_HA_TLS_CA:-}" ]; then
  scheme=https
  curl_tls=(--cacert "$ARGUS_HA_TLS_CA")
fi
declare -a api debug
# ARGUS_HA_REPLICA_GOGC=N: the replicas (only) collect at GOGC=N, as an
# operator would set it in their environment.
replica_env=()
if [ -n "${ARGUS_HA_REPLICA_GOGC:-}" ]; then
  replica_env=("GOGC=$ARGUS_HA_REPLICA_GOGC")
fi
for i in $(seq "$replicas"); do
  port; api[i]=$REPLY
  # ARGUS_HA_DEBUG=1: each replica serves its profiles on a loopback port
  # of its own (--debug-listen), listed third in DIR/replicas (etcd's
  # members serve theirs on their client URLs: --enable-pprof).
  debug_flags=()
  if [ "${ARGUS_HA_DEBUG:-}" = 1 ]; then
    port; debug[i]=127.0.0.1:$REPLY
    debug_flags=(--debug-listen "${debug[i]}")
  fi
  env "${replica_env[@]}" "$orch" --listen "127.0.0.1:${api[i]}" --data-dir "$dir/orch$i" \
    --etcd-endpoints "$endpoints" --mongo-uri "mongodb://127.0.0.1:$mongo/" \
    --replica-id "r$i" --advertise-url "$scheme://127.0.0.1:${api[i]}" --log-format json "${debug_flags[@]}" "$@" \
    >"$dir/logs/orch$i.log" 2>&1 &
  pids+=($!)
done
for i in $(seq "$replicas"); do
  wait_for "replica r$i" 120 "${pids[i + 3]}" curl -fsS "${curl_tls[@]}" "$scheme://127.0.0.1:${api[i]}/readyz" ||
    { tail -20 "$dir/logs/orch$i.log" >&2; exit 1; }
done
for i in $(seq "$replicas"); do
  echo "$scheme://127.0.0.1:${api[i]} ${pids[i + 3]}${debug[i]:+ ${debug[i]}}"
done >"$dir/replicas.tmp"
mv "$dir/replicas.tmp" "$dir/replicas"
{
  for i in 1 2 3; do echo "e$i http://127.0.0.1:${client[i]} ${pids[i - 1]}"; done
  echo "ferretdb mongodb://127.0.0.1:$mongo/ ${pids[3]}"
} >"$dir/stores.tmp"
mv "$dir/stores.tmp" "$dir/stores"
: >"$dir/ready"
log "$replicas replicas ready (DIR/replicas); SIGTERM or SIGINT stops everything"

# In the foreground until told to stop; a replica that dies (killed to
# test failover) leaves the others running.
while :; do
  wait -n 2>/dev/null || true
  alive=
  for p in "${pids[@]}"; do
    if kill -0 "$p" 2>/dev/null; then alive=1; break; fi
  done
  [ -n "$alive" ] || break
done
