// Package hub is the orchestrator's side of fleet mode: it serves the
// agents of pull clusters — clusters the orchestrator cannot dial — over
// one long-lived stream each (the Fleet service of src/apis/fleet, on its
// own framing or on gRPC), hands them their
// cluster's work and stores what they report, so that status, history,
// notifications and the console read a pull cluster exactly as they read
// a push cluster.
//
// Work. rsync (through the Delegate interface it declares) publishes each
// placement on a pull cluster as a work record in etcd,
//
//	<prefix>/fleet/work/<cluster>/<context>/<app>     the placement, manifests by sha256
//	<prefix>/fleet/reports/<cluster>/<context>/<app>  the agent's progress on it (generation, quiet, settled)
//	<prefix>/fleet/sessions/<cluster>                 the agent's live stream: replica and session id, on a lease
//
// and a record's etcd revision is its generation. Any replica serves any
// agent: a stream starts with the agent's last work revision, and the hub
// sends what changed since (with the list of keys, so deletions are
// never missed), then follows one shared watch of the work records. The
// agent asks for the manifests it lacks by hash.
//
// Status. The replica holding an agent's stream writes what the agent
// reports — rsync statuses, ResourceBundleState snapshots (checked as the
// watcher checks a push cluster's), the cluster's connectivity and
// monitor state — straight into the contexts and cluster states, in
// transactions each guarded by the agent's session key, so a replica the
// agent has left can never write for it again. Writes of many agents are
// batched into one etcd transaction (a guarded sub-transaction per
// cluster) whenever more than one waits. Only then is the report
// acknowledged; the agent sends what was not acknowledged again after a
// reconnect.
//
// Staleness. A pull cluster's owner among the replicas (ownership, kind
// "pullclusters") follows the session keys: once a cluster has had no
// stream for UnreachableAfter, it records it Unreachable, and the status
// engine reports its resources Unknown, as for a push cluster whose API
// server stops answering. A stream whose agent stops reporting for
// SilentAfter makes the monitor Silent.
//
// Transports. ListenTLS sorts the API port's TLS connections by the
// protocol they negotiate: pb.FramedALPN to the stream's own framing
// (package frame; one goroutine a connection, the handler), pb.ALPN to a
// gRPC server on gRPC's own HTTP/2 transport (agents that predate the
// framing), the rest to net/http, whose HTTP/2 requests for the service
// Handler serves.
//
// Cost per connected agent: its stream's goroutines (the handler, which
// receives on the framed and native transports; gRPC's three more on the
// native one; a sender only while something is queued), a small struct,
// and timers; nothing per idle cluster polls.
//
//	h, _ := hub.New(hub.Options{Client: cli, Contexts: store, Cache: cache, Credentials: joinSvc})
//	go h.Run(ctx)
//	srv.Handler = h.Handler(api) // gRPC on the API's port, the rest to the API
package hub
