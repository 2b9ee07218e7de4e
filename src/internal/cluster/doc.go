// Package cluster turns a registered cluster's kubeconfig into clients, and
// caches them per cluster until its kubeconfig changes.
package cluster
