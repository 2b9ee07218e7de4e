#!/usr/bin/env bash
# Builds the binaries the simulated clusters run (kube-apiserver,
# kube-controller-manager, kube-scheduler from k8s.io/kubernetes, and kwok)
# into a per-version cache, only when they are missing. Runs under flock so
# parallel `make` invocations never race on the cache.
set -euo pipefail

K8S_VERSION=v1.34.4
KWOK_VERSION=v0.8.0
root=$(cd "$(dirname "$0")/.." && pwd)
cache=${ARGUS_CACHE_DIR:-$HOME/.cache/argus}
bin=$cache/k8s-$K8S_VERSION/bin
mkdir -p "$bin"

exec 9>"$cache/build.lock"
flock 9

ldflags="-s -w \
 -X k8s.io/component-base/version.gitVersion=$K8S_VERSION \
 -X k8s.io/component-base/version.gitMajor=1 \
 -X k8s.io/component-base/version.gitMinor=34 \
 -X k8s.io/component-base/version.gitTreeState=clean \
 -X k8s.io/client-go/pkg/version.gitVersion=$K8S_VERSION \
 -X k8s.io/client-go/pkg/version.gitMajor=1 \
 -X k8s.io/client-go/pkg/version.gitMinor=34"

for cmd in kube-apiserver kube-controller-manager kube-scheduler; do
  if [ -x "$bin/$cmd" ]; then continue; fi
  start=$(date +%s)
  echo "sim: building $cmd $K8S_VERSION (cold build: several minutes on 2 cores)..." >&2
  (cd "$root/scripts/k8stools" && CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" \
     -o "$bin/$cmd.tmp" "k8s.io/kubernetes/cmd/$cmd")
  mv "$bin/$cmd.tmp" "$bin/$cmd"
  echo "sim: built $cmd in $(( $(date +%s) - start ))s" >&2
done

if [ ! -x "$bin/kwok" ]; then
  start=$(date +%s)
  echo "sim: building kwok $KWOK_VERSION..." >&2
  tmp=$(mktemp -d)
  # kwok pins its own k8s.io versions (v0.36) and has no replace directives,
  # so `go install pkg@version` builds it exactly as its authors tested it.
  GOBIN=$tmp CGO_ENABLED=0 go install -trimpath -ldflags "-s -w" "sigs.k8s.io/kwok/cmd/kwok@$KWOK_VERSION"
  mv "$tmp/kwok" "$bin/kwok"
  rmdir "$tmp"
  echo "sim: built kwok in $(( $(date +%s) - start ))s" >&2
fi
echo "$bin"
