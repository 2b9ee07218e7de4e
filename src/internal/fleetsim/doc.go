// Package fleetsim simulates a fleet of pull clusters in one process, for
// benchmarks of the orchestrator at fleet size (issue 26): each cluster is
// a real fleet-mode agent (package fleet/agent) with its own stream to the
// orchestrator, whose Kubernetes side is an in-memory store instead of an
// API server. A placement's resources are Applied at once and reported
// Ready in the placement's ResourceBundleState; churn flips one resource's
// readiness at a time, at a configured rate per cluster, and every change
// made is recorded so that the orchestrator's notifications can be checked
// for loss. Clusters can be disconnected and reconnected one by one.
//
// It is a benchmark tool: acceptance tests keep using the simulated
// clusters of package simcluster (real API servers).
//
//	tokens, _ := fleetsim.Register(ctx, fleetsim.RegisterOptions{API: url, Provider: "fleet", Clusters: names, Label: "fleet"})
//	f, _ := fleetsim.New(fleetsim.Options{Orchestrators: []string{url}, Tokens: tokens, Churn: 10})
//	err := f.Run(ctx) // until ctx ends; f.Changes() lists what it changed
package fleetsim
