#!/usr/bin/env bash
# Onboards the sample composite app "shop" (scripts/demo/app: charts frontend,
# backend and db, with one profile each) onto an Argus orchestrator through
# the EMCO-style v2 API, the way an EMCO user would with curl, then approves
# and instantiates it on every cluster given.
#
#   ARGUS_URL=http://127.0.0.1:9015 scripts/demo/onboard.sh \
#       cluster1=/path/to/cluster1/kubeconfig cluster2=/path/to/cluster2/kubeconfig
#
# Each argument registers a cluster NAME with its kubeconfig, labelled
# $LABEL; the app is placed on every cluster with that label. The names of
# what it creates can be changed through the environment (defaults below).
# It stops at the first call that does not answer as expected, naming it.
# Needs curl and tar.
set -euo pipefail

ARGUS_URL=${ARGUS_URL:-http://127.0.0.1:9015}
PROVIDER=${PROVIDER:-demo-provider}
LABEL=${LABEL:-edge}
PROJECT=${PROJECT:-demo}
COMPOSITE_APP=${COMPOSITE_APP:-shop}
VERSION=${VERSION:-v1}
COMPOSITE_PROFILE=${COMPOSITE_PROFILE:-shop-profile}
DIG=${DIG:-shop}
APPS=(frontend backend db)

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
app_dir=$here/app

if [ $# -eq 0 ]; then
    echo "usage: ARGUS_URL=http://HOST:PORT $0 NAME=KUBECONFIG..." >&2
    exit 2
fi
for arg in "$@"; do
    if [[ $arg != *=* ]] || [ ! -r "${arg#*=}" ]; then
        echo "onboard: argument '$arg' is not NAME=KUBECONFIG with a readable kubeconfig" >&2
        exit 2
    fi
done

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# call EXPECTED METHOD PATH WHAT [curl arguments...]: sends the request,
# prints one line, and stops the script unless the answer's code is EXPECTED.
call() {
    local want=$1 method=$2 path=$3 what=$4
    shift 4
    local code
    code=$(curl -sS --max-time 60 -o "$work/body" -w '%{http_code}' -X "$method" "$@" "$ARGUS_URL$path") || code=000
    if [ "$code" != "$want" ]; then
        echo "onboard: FAILED: $method $path ($what) answered $code, want $want" >&2
        if [ -s "$work/body" ]; then
            echo "onboard: response: $(cat "$work/body")" >&2
        fi
        exit 1
    fi
    printf '  %s %s  %s -> %s\n' "$method" "$path" "$what" "$code"
}

# post PATH WHAT JSON: creates an object from a JSON body.
post() { call 201 POST "$1" "$2" -H 'Content-Type: application/json' --data-binary "$3"; }

# upload PATH WHAT METADATA FILE: an EMCO multipart upload, parts "metadata"
# (the object) and "file".
upload() { call 201 POST "$1" "$2" --form-string "metadata=$3" -F "file=@$4;type=application/octet-stream"; }

# obj NAME DESCRIPTION [SPEC]: an EMCO object, {"metadata": {...}, "spec": SPEC}.
obj() {
    local m
    m=$(printf '"metadata":{"name":"%s","description":"%s"}' "$1" "$2")
    if [ $# -ge 3 ]; then printf '{%s,"spec":%s}' "$m" "$3"; else printf '{%s}' "$m"; fi
}

echo "onboard: onboarding composite app $COMPOSITE_APP/$VERSION of project $PROJECT at $ARGUS_URL"

# Clusters: a provider, then each cluster with its kubeconfig and label.
post /v2/cluster-providers "$PROVIDER" "$(obj "$PROVIDER" "the demo's simulated clusters")"
for arg in "$@"; do
    name=${arg%%=*}
    upload "/v2/cluster-providers/$PROVIDER/clusters" "$name + kubeconfig" "$(obj "$name" "simulated cluster $name")" "${arg#*=}"
    post "/v2/cluster-providers/$PROVIDER/clusters/$name/labels" "$LABEL" "{\"clusterLabel\":\"$LABEL\"}"
done

# The project and the composite app with its three apps (Helm charts packed
# as helm package would: the chart's directory at the archive's top).
post /v2/projects "$PROJECT" "$(obj "$PROJECT" "Argus demo project")"
post "/v2/projects/$PROJECT/composite-apps" "$COMPOSITE_APP $VERSION" \
    "$(obj "$COMPOSITE_APP" "a web shop: frontend, backend, db" "{\"compositeAppVersion\":\"$VERSION\"}")"
ca=/v2/projects/$PROJECT/composite-apps/$COMPOSITE_APP/$VERSION
for app in "${APPS[@]}"; do
    tar -C "$app_dir/charts" -czf "$work/$app.tgz" "$app"
    upload "$ca/apps" "$app + $app.tgz" "$(obj "$app" "the $app chart")" "$work/$app.tgz"
done

# A composite profile with one profile per app: a .tgz of manifest.yaml and
# the override values file it names.
post "$ca/composite-profiles" "$COMPOSITE_PROFILE" "$(obj "$COMPOSITE_PROFILE" "demo overrides")"
for app in "${APPS[@]}"; do
    tar -C "$app_dir/profiles/$app" -czf "$work/$app-profile.tgz" manifest.yaml override_values.yaml
    upload "$ca/composite-profiles/$COMPOSITE_PROFILE/profiles" "$app-profile + $app-profile.tgz" \
        "$(obj "$app-profile" "overrides for $app" "{\"app\":\"$app\"}")" "$work/$app-profile.tgz"
done

# The deployment intent group (two frontend replicas per cluster), its
# generic placement intent with one app intent per app (every cluster
# labelled $LABEL), and the DIG intents naming that placement intent.
post "$ca/deployment-intent-groups" "$DIG" "$(obj "$DIG" "the shop on every $LABEL cluster" \
    "{\"compositeProfile\":\"$COMPOSITE_PROFILE\",\"version\":\"r1\",
      \"overrideValues\":[{\"app\":\"frontend\",\"values\":{\"replicaCount\":\"2\"}}]}")"
dig=$ca/deployment-intent-groups/$DIG
post "$dig/generic-placement-intents" "$DIG-placement" "$(obj "$DIG-placement" "everything on every $LABEL cluster")"
for app in "${APPS[@]}"; do
    post "$dig/generic-placement-intents/$DIG-placement/app-intents" "$app-placement" "$(obj "$app-placement" "$app on every $LABEL cluster" \
        "{\"app\":\"$app\",\"intent\":{\"allOf\":[{\"clusterProvider\":\"$PROVIDER\",\"clusterLabel\":\"$LABEL\"}]}}")"
done
post "$dig/intents" "$DIG-intents" "$(obj "$DIG-intents" "the DIG's intents" "{\"intent\":{\"genericPlacementIntent\":\"$DIG-placement\"}}")"

# Deploy: approve, then instantiate (202: rsync applies in the background).
call 202 POST "$dig/approve" ""
call 202 POST "$dig/instantiate" ""

echo "onboard: instantiated; status: curl -s '$ARGUS_URL$dig/status?type=cluster&output=summary'"
