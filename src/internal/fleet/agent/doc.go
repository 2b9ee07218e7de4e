// Package agent is a pull cluster's side of fleet mode (bin/monitor
// --orchestrator URL --join-token TOKEN): it joins the orchestrator once
// by token, keeps the credential it got in its own cluster, dials out over
// one long-lived stream — on its own framing over TLS (pb.FramedALPN),
// else gRPC (through an HTTP proxy if the environment names one) —
// receives its own cluster's work, applies it locally and streams the
// cluster's status back.
//
// The agent's Kubernetes side is the Cluster interface: Apply and Forget
// a placement, report rsync statuses, bundle statuses and the monitor's
// state. KubeCluster is the real one — the rsync engine itself (server-side
// apply, error classes, install waves) on a local copy of the work, the
// monitor's machinery in-process, and an informer on the
// ResourceBundleStates it fills — and a fleet simulator can put an
// in-memory one in its place.
//
// Work arrives by revision: the agent names the last revision it took in
// when it connects, and the hub sends only what changed since, with the
// list of current items so that nothing removed is missed; manifests
// arrive by content hash, asked for only when the agent lacks them.
// Status goes up as deltas (the statuses, bundles and progress that
// changed), each report kept until the hub acknowledges it and sent again
// after a reconnect. While no orchestrator answers, the cluster stays at
// its last desired state, rsync keeps retrying what it had not finished,
// and status keeps being collected; the agent reconnects with jittered
// backoff to another of its URLs, picked at random (as the first is), so
// that a fleet's agents spread over the replicas.
//
//	a, _ := agent.New(agent.Options{Orchestrators: urls, JoinToken: tok, Cluster: kube, Credentials: secrets})
//	err := a.Run(ctx) // returns when ctx ends, or at once when the join is refused
package agent
