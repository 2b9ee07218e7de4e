// Package deployfiles checks that the files Argus ships for running it are
// correct: the Dockerfile at the repository root, deployments/docker-compose.yaml
// and the Kubernetes manifests under deployments/kubernetes. No Docker engine
// is needed: the compose file is loaded with the Compose specification's own
// loader, the kustomizations are built with kustomize's library exactly as
// `kubectl apply -k` builds them, and the result is server-side dry-run on a
// simulated cluster (a real kube-apiserver).
//
// The package has only tests; nothing imports it.
//
//	go test ./src/internal/deployfiles/
package deployfiles
