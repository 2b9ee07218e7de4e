#!/usr/bin/env bash
# make demo: builds Argus, starts two simulated clusters with a monitor each
# and the orchestrator on embedded stores, onboards the sample composite app
# (scripts/demo/app) through the v2 API, subscribes a local receiver to its
# status, shows the status, makes one pod not ready and shows the
# notification and the new status. Then it leaves everything running until
# Ctrl-C and stops every process it started. See docs/demo.md.
#
# Each step prints a short summary (what it made, states, counts, time);
# a table of all steps ends the run. Environment (defaults in brackets):
#   DEMO_EXIT=1               run every step, check each result, stop, exit 0
#                             or non-zero naming the failed step [0]
#   DEMO_VERBOSE=1            also print every onboarding call and the full
#                             JSON answers [0]
#   DEMO_DIR                  logs, kubeconfigs, data [.argus/demo]
#   DEMO_PORT                 orchestrator API port [9015]
#   DEMO_MONITOR_PORT         first monitor's health port; the second gets
#                             the next one [9016]
#   DEMO_RECEIVER_PORT        notification receiver port [9018]
#   DEMO_NODES                fake nodes per cluster [2]
#   DEMO_TIMEOUT              seconds any one wait may take [120]
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$root"

DEMO_EXIT=${DEMO_EXIT:-0}
DEMO_VERBOSE=${DEMO_VERBOSE:-0}
DEMO_DIR=${DEMO_DIR:-$root/.argus/demo}
DEMO_PORT=${DEMO_PORT:-9015}
DEMO_MONITOR_PORT=${DEMO_MONITOR_PORT:-9016}
DEMO_RECEIVER_PORT=${DEMO_RECEIVER_PORT:-9018}
DEMO_NODES=${DEMO_NODES:-2}
DEMO_TIMEOUT=${DEMO_TIMEOUT:-120}
MAKE=${MAKE:-make}

clusters=(cluster1 cluster2)
bin=$root/bin
sc=$bin/simcluster
logs=$DEMO_DIR/logs
notifications=$DEMO_DIR/notifications.log
argus=http://127.0.0.1:$DEMO_PORT
receiver=http://127.0.0.1:$DEMO_RECEIVER_PORT
# Names onboard.sh uses by default.
provider=demo-provider
dig_path=/v2/projects/demo/composite-apps/shop/v1/deployment-intent-groups/shop
dig=$argus$dig_path
# 2 clusters x (frontend: Deployment, Service, ConfigMap, 2 Pods;
# backend: Deployment, Service, ConfigMap, 1 Pod; db: StatefulSet, Service,
# ConfigMap, 1 Pod).
expected_resources=26

# ---- steps and failure reports ----------------------------------------

total_steps=9
step_no=0
step_name="starting"
step_began=0
table_steps=()
table_results=()
table_times=()
# step TITLE SHORT: starts a step; SHORT names it in the final table.
step() {
    step_no=$((step_no + 1))
    step_name=$1
    step_short=${2:-$1}
    step_began=$SECONDS
    printf '\n[%d/%d] %s\n' "$step_no" "$total_steps" "$1"
}

# done_step RESULT: the step's one-line outcome, kept for the final table.
done_step() {
    local took=$((SECONDS - step_began))
    printf '  => %s  (%ss)\n' "$1" "$took"
    table_steps+=("$step_short")
    table_results+=("$1")
    table_times+=("$took")
}

# verbose: true with DEMO_VERBOSE=1 (full JSON answers and every call).
verbose() { [ "$DEMO_VERBOSE" = 1 ]; }

summary_table() {
    local i
    echo
    printf '  %-4s %-14s %-70s %s\n' step what result time
    for i in "${!table_steps[@]}"; do
        printf '  %-4s %-14s %-70.70s %4ss\n' "$((i + 1))" "${table_steps[i]}" "${table_results[i]}" "${table_times[i]}"
    done
}

# fail MESSAGE [LOG]: names the step, shows the log's tail, exits non-zero.
reported=0
serving=0 # set once every step is done and the demo waits for Ctrl-C
fail() {
    if [ "$serving" = 1 ]; then
        echo "demo: FAILED while running: $1" >&2
    else
        echo "demo: FAILED at step [$step_no/$total_steps] $step_name: $1" >&2
    fi
    if [ -n "${2:-}" ] && [ -s "$2" ]; then
        echo "---- last lines of $2:" >&2
        tail -n 25 "$2" >&2
        echo "----" >&2
    fi
    reported=1
    exit 1
}

# ---- processes ------------------------------------------------------------

# Every process runs in a process group of its own (setsid), so that stopping
# it reaches everything it started and a Ctrl-C in the terminal reaches only
# this script, which then stops them in order.
pids=()
names=()
plogs=()
# start NAME LOG COMMAND...: starts COMMAND in the background; sets $proc to
# its index in pids.
start() {
    local name=$1 log=$2
    shift 2
    setsid "$@" >>"$log" 2>&1 </dev/null &
    pids+=("$!")
    names+=("$name")
    plogs+=("$log")
    proc=$((${#pids[@]} - 1))
}

# stop_procs GRACE INDEX...: SIGTERM to each group, then SIGKILL to what is
# left after GRACE seconds, then reap.
stop_procs() {
    local i grace=$1
    shift
    local deadline=$((SECONDS + grace))
    for i in "$@"; do kill -TERM -- "-${pids[i]}" 2>/dev/null || true; done
    for i in "$@"; do
        while kill -0 "${pids[i]}" 2>/dev/null && [ $SECONDS -lt $deadline ]; do sleep 0.1; done
        if kill -0 "${pids[i]}" 2>/dev/null; then
            echo "demo: ${names[i]} did not stop in time; killing it" >&2
            kill -KILL -- "-${pids[i]}" 2>/dev/null || true
        fi
        wait "${pids[i]}" 2>/dev/null || true
    done
}

cleanup() {
    local code=$?
    trap - EXIT
    trap '' INT TERM HUP # a second Ctrl-C must not leave processes behind
    local signalled=0
    case $code in 129 | 130 | 143) signalled=1 ;; esac
    if [ "$signalled" = 1 ]; then
        echo
        if [ -s "${stop_reason:-}" ]; then echo "demo: stopping: $(cat "$stop_reason")"; fi
        if [ "$serving" = 1 ]; then
            code=0 # a signal is how the running demo is meant to end
        else
            echo "demo: interrupted at step [$step_no/$total_steps] $step_name"
        fi
    elif [ "$code" != 0 ] && [ "$reported" = 0 ]; then
        # A command failed under set -e; its own message is above.
        echo "demo: FAILED at step [$step_no/$total_steps] $step_name (exit $code; see the messages above)" >&2
    fi
    if [ -n "${watcher_pid:-}" ]; then kill -TERM "$watcher_pid" 2>/dev/null || true; fi
    if [ -n "${stop_reason:-}" ]; then rm -f "$stop_reason"; fi
    if [ -n "${fg_pid:-}" ]; then
        kill -TERM -- "-$fg_pid" 2>/dev/null || true
        wait "$fg_pid" 2>/dev/null || true
    fi
    if [ -n "${build_pid:-}" ]; then
        kill -TERM "$build_pid" 2>/dev/null || true
        wait "$build_pid" 2>/dev/null || true
    fi
    if [ ${#pids[@]} -gt 0 ]; then
        local began=$SECONDS
        echo
        echo "demo: stopping ${#pids[@]} processes..."
        # The clusters (index 0) go last, so nothing watching them complains.
        local rest=()
        for ((i = ${#pids[@]} - 1; i >= 1; i--)); do rest+=("$i"); done
        # Graces of 4 s then 3 s keep the whole stop under 10 s.
        if [ ${#rest[@]} -gt 0 ]; then stop_procs 4 "${rest[@]}"; fi
        stop_procs 3 0
        echo "demo: stopped everything in $((SECONDS - began))s; logs are kept in $logs"
    fi
    exit "$code"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
trap 'exit 129' HUP

# nap SECONDS: sleep, but let a signal's trap run at once (bash runs a trap
# only after the foreground command ends; it interrupts a wait).
nap() {
    sleep "$1" &
    wait $! || true
}

# How the demo stops. A Ctrl-C in its terminal reaches every process of
# the foreground job, this script included. A signal sent to make's pid
# alone (setsid make demo & ... kill -TERM $!) does not: GNU make passes
# SIGTERM on to its recipe (this script: the Makefile execs it), but on
# SIGINT, SIGHUP or SIGQUIT it only resets its handler and waits for the
# recipe, and a parent killed outright tells nobody. So a watcher follows
# the parent: when it is gone, or when make has dropped a handler for a
# fatal signal it had, the demo stops as if it had been signalled itself.
parent=$PPID
# ppid_of PID: the parent of PID, from /proc (the fields after the
# command). Each /proc file is read whole at once: read piecemeal, a
# file that changes meanwhile can come out garbled.
ppid_of() {
    local stat
    stat=$(<"/proc/$1/stat") || return 1
    stat=${stat##*) }
    set -- $stat
    echo "$2"
}
# caught PID: the mask of signals PID has handlers for.
caught() {
    local status
    status=$(<"/proc/$1/status") || return 1
    [[ $status =~ SigCgt:[[:space:]]*([0-9a-f]+) ]] || return 1
    echo "0x${BASH_REMATCH[1]}"
}
# parent_state: why the demo should stop, or nothing (also when /proc
# cannot be read just now: that is no reason). A parent that exits hands
# its children to another at once, zombie or not.
parent_state() {
    local ppid now
    ppid=$(ppid_of $$ 2>/dev/null) || return 0
    if [ "$ppid" != "$parent" ]; then
        echo "its parent ($comm, pid $parent) is gone"
    elif now=$(caught "$parent" 2>/dev/null) && [ $((had & ~now)) -ne 0 ]; then
        echo "$comm (pid $parent) was told to stop"
    fi
}
watch_parent() {
    # SIGHUP, SIGINT, SIGQUIT and SIGTERM are bits 0, 1, 2 and 14.
    local fatal=$((0x4007)) why=""
    had=0 comm=""
    read -r comm <"/proc/$parent/comm" 2>/dev/null || true
    case $comm in
    make | gmake) had=$(($(caught "$parent" 2>/dev/null || echo 0) & fatal)) ;;
    esac
    # Twice in a row, half a second apart, before it counts.
    while :; do
        sleep 0.5
        why=$(parent_state)
        [ -n "$why" ] || continue
        sleep 0.5
        why=$(parent_state)
        [ -z "$why" ] || break
    done
    echo "$why" >"$stop_reason"
    kill -TERM $$ 2>/dev/null || true
}
stop_reason=$(mktemp)
if [ "$parent" -gt 1 ] && [ -r "/proc/$parent/status" ]; then
    watch_parent </dev/null >/dev/null 2>&1 &
    watcher_pid=$!
fi

# wait_until SECONDS WHAT PROC COMMAND...: polls COMMAND until it succeeds;
# fails the step when process PROC (an index, or -1) exits or time is up.
wait_until() {
    local limit=$1 what=$2 p=$3
    shift 3
    local deadline=$((SECONDS + limit)) log=""
    if [ "$p" -ge 0 ]; then log=${plogs[p]}; fi
    until "$@" >/dev/null 2>&1; do
        if [ "$p" -ge 0 ] && ! kill -0 "${pids[p]}" 2>/dev/null; then
            fail "${names[p]} exited while waiting for $what" "$log"
        fi
        if [ $SECONDS -ge $deadline ]; then
            fail "$what: not so after ${limit}s" "$log"
        fi
        nap 0.25
    done
}

http_ok() { curl -sf -o /dev/null --max-time 2 "$1"; }

port_in_use() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# status QUERY: the DIG status for the query string; fails unless 200.
status() { curl -sf --max-time 10 "$dig/status?$1"; }

# field PATH: a value of the JSON document on stdin.
field() { "$sc" json "$1"; }

summary_ready() { [ "$(status 'type=cluster&output=summary' | field ready)" = "$1" ]; }

# how_to_stop: the ways to end the demo, printed when it starts and when it
# is up.
how_to_stop() {
    local by="this script (pid $$)"
    if [ "$(cat "/proc/$parent/comm" 2>/dev/null)" = make ]; then by="make (pid $parent) or this script (pid $$)"; fi
    echo "To stop: Ctrl-C, or kill -TERM (or -INT) $by: every process the demo started"
    echo "stops within 10 s and ports $DEMO_PORT, $DEMO_MONITOR_PORT, $((DEMO_MONITOR_PORT + 1)) and $DEMO_RECEIVER_PORT are freed; logs stay in $logs."
}

# ---- 1: build ---------------------------------------------------------------

step "checking ports and building (make build sim)" "build"
build_pid=""
for port in "$DEMO_PORT" "$DEMO_MONITOR_PORT" "$((DEMO_MONITOR_PORT + 1))" "$DEMO_RECEIVER_PORT"; do
    if port_in_use "$port"; then
        fail "port $port is already in use (another demo or orchestrator?); stop it, or choose other ports with DEMO_PORT, DEMO_MONITOR_PORT (two ports) and DEMO_RECEIVER_PORT"
    fi
done
# A fresh directory each run; refuse to empty one the demo did not make.
if [ -e "$DEMO_DIR" ] && [ ! -e "$DEMO_DIR/.argus-demo" ]; then
    fail "$DEMO_DIR exists and was not made by the demo; remove it or set DEMO_DIR"
fi
rm -rf "$DEMO_DIR"
mkdir -p "$logs"
touch "$DEMO_DIR/.argus-demo"
cold=0
if [ ! -x "${ARGUS_CACHE_DIR:-$HOME/.cache/argus}/k8s-v1.34.4/bin/kube-apiserver" ]; then
    cold=1
    echo "  first run: building kube-apiserver, kube-controller-manager and kube-scheduler (Kubernetes v1.34.4)"
    echo "  and kwok v0.8.0 for the simulated clusters: about 10 minutes on 2 cores, once (cached in ~/.cache/argus)"
fi
how_to_stop | sed 's/^/  /'
echo "  building bin/orchestrator (with the web console), bin/monitor, bin/simcluster, bin/argus; log $logs/build.log"
# The build runs in the background so that a long one can report progress.
"$MAKE" --no-print-directory build sim >"$logs/build.log" 2>&1 &
build_pid=$!
last_report=$SECONDS
# building: what the build is at, from its log: the Kubernetes build's
# progress lines ("sim: ..."), else the Go binary being compiled.
building() {
    local line
    line=$(grep -E '^(sim: |[^ ]*go build -o )' "$logs/build.log" 2>/dev/null | tail -n 1) || true
    case $line in
    sim:*) echo "$line" ;;
    *"go build -o "*)
        line=${line#*go build -o }
        echo "compiling ${line%% *} (Go; a first build compiles every dependency, a few minutes on 2 cores)"
        ;;
    *) echo "starting make build sim" ;;
    esac
}
while kill -0 "$build_pid" 2>/dev/null; do
    if [ $((SECONDS - last_report)) -ge 30 ]; then
        last_report=$SECONDS
        printf '  ... still building (%ss): %s\n' "$((SECONDS - step_began))" "$(building)"
    fi
    nap 1
done
wait "$build_pid" || { build_pid=""; fail "make build sim failed" "$logs/build.log"; }
build_pid=""
if [ "$cold" = 1 ]; then
    done_step "built Argus and the simulated clusters' Kubernetes binaries"
else
    done_step "built Argus (Kubernetes binaries cached)"
fi

# ---- 2: clusters --------------------------------------------------------------

step "starting ${#clusters[@]} simulated clusters" "clusters"
start simcluster "$logs/simcluster.log" "$sc" up --clusters "${#clusters[@]}" --nodes "$DEMO_NODES" --dir "$DEMO_DIR/clusters"
wait_until 240 "the clusters serve (file $DEMO_DIR/clusters/ready)" "$proc" test -e "$DEMO_DIR/clusters/ready"
for c in "${clusters[@]}"; do
    echo "  $c: kubeconfig $DEMO_DIR/clusters/$c/kubeconfig, $DEMO_NODES fake nodes"
done
if verbose; then echo "  logs: $logs/simcluster.log, $DEMO_DIR/clusters/<cluster>/*.log"; fi
done_step "${#clusters[@]} clusters serving, $DEMO_NODES fake nodes each"

# ---- 3: monitors ----------------------------------------------------------------

step "installing the monitor's CRD and RBAC and starting one monitor per cluster" "monitors"
manifests=deployments/kubernetes/monitor
for i in "${!clusters[@]}"; do
    c=${clusters[i]}
    kc=$DEMO_DIR/clusters/$c/kubeconfig
    # The Deployment is left out: the monitor runs here, as a process.
    "$sc" apply --kubeconfig "$kc" "$manifests/k8splugin.io_resourcebundlestates.yaml" \
        "$manifests/namespace.yaml" "$manifests/rbac.yaml" >"$logs/install-$c.log" 2>&1 ||
        fail "applying $manifests to $c" "$logs/install-$c.log"
    applied=$(grep -c '^applied' "$logs/install-$c.log")
    port=$((DEMO_MONITOR_PORT + i))
    # No --namespace: the monitor watches every namespace, so bundles and
    # objects outside "default" (a v1 instance's namespace, say) are tracked.
    start "monitor-$c" "$logs/monitor-$c.log" "$bin/monitor" --kubeconfig "$kc" \
        --listen "127.0.0.1:$port" --log-format text
    wait_until "$DEMO_TIMEOUT" "monitor of $c ready (http://127.0.0.1:$port/readyz)" "$proc" http_ok "http://127.0.0.1:$port/readyz"
    echo "  $c: $applied objects applied (CRD, RBAC), monitor running (http://127.0.0.1:$port/metrics)"
done
done_step "CRD installed and a monitor running on each of ${#clusters[@]} clusters"

# ---- 4: orchestrator --------------------------------------------------------------

step "starting the orchestrator on embedded etcd and MongoDB-wire stores" "orchestrator"
# The demo's receiver listens on loopback, which callbacks may not reach by
# default (docs/security.md): allow exactly that address.
start orchestrator "$logs/orchestrator.log" "$bin/orchestrator" --data-dir "$DEMO_DIR/argus-data" \
    --listen "127.0.0.1:$DEMO_PORT" --log-format text --callback-allow 127.0.0.1
orchestrator=$proc
wait_until "$DEMO_TIMEOUT" "orchestrator ready ($argus/readyz)" "$proc" http_ok "$argus/readyz"
echo "  API on $argus, web console on $argus/ , log $logs/orchestrator.log"
done_step "orchestrator ready on embedded etcd and FerretDB"

# ---- 5: onboard -------------------------------------------------------------------

step "onboarding the sample app through the v2 API (scripts/demo/onboard.sh)" "onboard"
onboard_args=()
for c in "${clusters[@]}"; do onboard_args+=("$c=$DEMO_DIR/clusters/$c/kubeconfig"); done
# In a group of its own and waited for, so a signal stops the demo at once.
ARGUS_URL=$argus PROVIDER=$provider setsid scripts/demo/onboard.sh "${onboard_args[@]}" >"$logs/onboard.log" 2>&1 </dev/null &
fg_pid=$!
onboarded=0
wait "$fg_pid" && onboarded=1
fg_pid=""
if [ "$onboarded" = 0 ]; then
    cat "$logs/onboard.log" >&2
    fail "onboarding (the failing call is named above)" "${plogs[orchestrator]}"
fi
if verbose; then cat "$logs/onboard.log"; fi
calls=$(grep -cE '^  (POST|PUT|GET) ' "$logs/onboard.log" || true)
echo "  created: cluster provider $provider with ${#clusters[@]} clusters labelled edge, project demo,"
echo "  composite app shop v1 (apps frontend, backend, db, a profile each), DIG shop placing every app on every edge cluster"
echo "  approved and instantiated; every call in $logs/onboard.log"
done_step "$calls API calls answered as expected; DIG shop instantiated"

# ---- 6: ready -------------------------------------------------------------------

step "waiting until every resource is ready on both clusters" "ready"
deadline=$((SECONDS + DEMO_TIMEOUT))
last=""
until summary_ready true 2>/dev/null; do
    counts=$(status 'type=cluster&output=summary' 2>/dev/null | field ready-status 2>/dev/null | tr -d ' \n' || true)
    if [ -n "$counts" ] && [ "$counts" != "$last" ]; then
        printf '  ... %ss: ready-status %s\n' "$((SECONDS - step_began))" "$counts"
        last=$counts
    fi
    if [ $SECONDS -ge $deadline ]; then
        fail "the app is not ready after ${DEMO_TIMEOUT}s (last ready-status: ${last:-none})" "${plogs[orchestrator]}"
    fi
    nap 0.5
done
ready_count=$(status 'type=cluster&output=summary' | field ready-status.Ready)
if [ "$ready_count" != "$expected_resources" ]; then
    fail "$ready_count resources Ready, want $expected_resources" "${plogs[orchestrator]}"
fi
done_step "ready: $ready_count of $expected_resources resources Ready on both clusters"

# ---- 7: subscribe ---------------------------------------------------------------------

step "subscribing a local receiver to the DIG's status" "subscribe"
start receiver "$logs/receiver.log" "$sc" receive --listen "127.0.0.1:$DEMO_RECEIVER_PORT" --out "$notifications"
wait_until "$DEMO_TIMEOUT" "receiver ready ($receiver/healthz)" "$proc" http_ok "$receiver/healthz"
echo "  receiver on $receiver/notify appends every notification to $notifications"
subscription='{"name":"demo","callback-url":"'$receiver'/notify","min-notify-interval":0,"metadata":{"demo":"true"},"type":"cluster","output":"all"}'
echo "  POST $dig_path/status/subscriptions  (type=cluster, output=all, to $receiver/notify)"
code=$(curl -sS --max-time 10 -o "$DEMO_DIR/subscription.json" -w '%{http_code}' \
    -H 'Content-Type: application/json' --data-binary "$subscription" "$dig/status/subscriptions") || code=000
if [ "$code" != 201 ]; then
    fail "creating the subscription answered $code, want 201: $(cat "$DEMO_DIR/subscription.json" 2>/dev/null)" "${plogs[orchestrator]}"
fi
if verbose; then field "" <"$DEMO_DIR/subscription.json" | sed 's/^/    /'; fi
done_step "subscription demo created (201); nothing sent until something changes"

# ---- 8: status ----------------------------------------------------------------------------

step "the status: GET $dig_path/status" "status"
# app_grid: ready/total of each app on each cluster, from GET /v2/overview.
app_grid() {
    local ov a c line name
    ov=$(curl -sf --max-time 10 "$argus/v2/overview") || return 1
    printf '  %-10s' app
    for c in "${clusters[@]}"; do printf ' %-10s' "$c"; done
    echo
    for a in 0 1 2; do
        name=$(printf '%s' "$ov" | field "deploymentIntentGroups.0.apps.$a.name" 2>/dev/null) || continue
        line=$(printf '  %-10s' "$name")
        for c in 0 1; do
            line+=$(printf ' %-10s' "$(printf '%s' "$ov" | field "deploymentIntentGroups.0.apps.$a.clusters.$c.ready-count")/$(printf '%s' "$ov" | field "deploymentIntentGroups.0.apps.$a.clusters.$c.total")")
        done
        echo "$line"
    done
}
echo "  state $(status 'type=cluster&output=summary' | field state.Actions.1.State), context $(status 'type=cluster&output=summary' | field status), ready $(status 'type=cluster&output=summary' | field ready); ready/total per app and cluster:"
app_grid || fail "GET /v2/overview failed" "${plogs[orchestrator]}"
if verbose; then
    echo "  ?type=cluster&output=summary"
    status 'type=cluster&output=summary' | field "" | sed 's/^/    /'
    echo
    echo "  ?type=cluster&output=all"
    status 'type=cluster&output=all' | field "" | sed 's/^/    /'
else
    echo "  (DEMO_VERBOSE=1 prints the full JSON answers)"
fi
done_step "$(status 'type=cluster&output=summary' | field ready-status.Ready) Ready, ready=$(status 'type=cluster&output=summary' | field ready)"

# ---- 9: a pod goes not ready --------------------------------------------------------------------

step "making one pod not ready (annotation sim.argus.io/state=not-ready)" "pod not ready"
pod=$("$sc" pod-state --kubeconfig "$DEMO_DIR/clusters/cluster1/kubeconfig" --namespace default \
    --selector app=backend --state not-ready)
echo "  cluster1: pod default/$pod annotated; kwok marks it Running but not Ready"
# The receiver writes one line per change: "  modified  Pod default/NAME  app=...".
pattern="^  modified +Pod (default/)?$pod( |\$)"
wait_until "$DEMO_TIMEOUT" "a notification with a 'modified' entry for pod $pod in $notifications" "$orchestrator" \
    grep -Eq "$pattern" "$notifications"
echo "  notification received after $((SECONDS - step_began))s (headers and changes; the full body is in $notifications):"
# Print the head of the last record that names the pod, up to its body.
awk -v pat="$pattern" '
    function flush() { if (matched) out = rec; rec = ""; matched = 0; body = 0 }
    /^=== notification/ { flush() }
    !body && /^[{[]/ { body = 1 }
    !body { rec = rec $0 "\n"; if ($0 ~ pat) matched = 1 }
    END { flush(); printf "%s", out }' "$notifications" | sed 's/^/    /'
wait_until "$DEMO_TIMEOUT" "the status summary reports not ready" "$orchestrator" summary_ready false
if verbose; then
    echo "  ?type=cluster&output=summary"
    status 'type=cluster&output=summary' | field "" | sed 's/^/    /'
fi
pending=$(status 'type=cluster&output=summary' | field ready-status.Pending 2>/dev/null || echo 0)
if [ "$pending" -lt 1 ]; then
    fail "ready is false but ready-status counts no Pending resource" "${plogs[orchestrator]}"
fi
echo "  the status now: ready false, $pending Pending; per app and cluster:"
app_grid || fail "GET /v2/overview failed" "${plogs[orchestrator]}"
# The pod's history: recorded once, from the change stream.
history_has_pod() { curl -sf --max-time 10 "$dig/status/history?resource=Pod/$pod" | grep -q '"ready-status":"Pending"'; }
wait_until "$DEMO_TIMEOUT" "the history lists pod $pod turning Pending" "$orchestrator" history_has_pod
hist=$(curl -sf --max-time 10 "$dig/status/history?resource=Pod/$pod")
n=0
while [ "$(printf '%s' "$hist" | field "history.$n.seq" 2>/dev/null || true)" != "" ]; do n=$((n + 1)); done
last=$((n - 1))
echo "  GET $dig_path/status/history?resource=Pod/$pod: $n entries, the last:"
echo "    $(printf '%s' "$hist" | field "history.$last.time")  $(printf '%s' "$hist" | field "history.$last.from.ready-status") -> $(printf '%s' "$hist" | field "history.$last.to.ready-status")  ($(printf '%s' "$hist" | field "history.$last.reason" 2>/dev/null || echo no reason))"
done_step "pod $pod not ready: notified, status Pending, history recorded"

# ---- done ------------------------------------------------------------------------------------

summary_table
if [ "$DEMO_EXIT" = 1 ]; then
    echo
    echo "demo: every step passed in ${SECONDS}s"
    exit 0
fi

cat <<EOF

The demo is running (ready in ${SECONDS}s). Open the web console at $argus/
(overview, drill-down with history, clusters), or try, from $root:

  DIG=$dig
  curl -s "\$DIG/status?type=cluster&output=summary" | bin/simcluster json
  curl -s "\$DIG/status?type=cluster&app=backend&cluster=$provider%2Bcluster1" | bin/simcluster json
  curl -s "\$DIG/status?type=rsync&output=summary" | bin/simcluster json
  curl -s "\$DIG/status?type=cluster&resource=Pod/$pod&output=detail" | bin/simcluster json
  curl -s "\$DIG/status?instance" | bin/simcluster json
  curl -s "\$DIG/status/subscriptions" | bin/simcluster json
  curl -s "\$DIG/status/history?resource=Pod/$pod" | bin/simcluster json
  curl -s "$argus/v2/overview" | bin/simcluster json

  # follow the status as Server-Sent Events (snapshot first, then each change):
  curl -sN "\$DIG/status?watch=true&type=cluster&output=summary"

  # bring the pod back (a notification follows), or break another one:
  bin/simcluster pod-state --kubeconfig $DEMO_DIR/clusters/cluster1/kubeconfig --selector app=backend --state ready
  bin/simcluster pod-state --kubeconfig $DEMO_DIR/clusters/cluster2/kubeconfig --selector app=db --state crashloop
  tail -f $notifications

Logs: $logs (clusters: $DEMO_DIR/clusters/<cluster>/*.log)
$(how_to_stop)
EOF

# Wait for Ctrl-C (the INT trap exits, and cleanup runs) or for a process to
# die, which is a failure worth reporting.
serving=1
wait -n "${pids[@]}" || true
for i in "${!pids[@]}"; do
    if ! kill -0 "${pids[i]}" 2>/dev/null; then
        fail "${names[i]} exited unexpectedly" "${plogs[i]}"
    fi
done
