// Package notify tells subscribers when a status answer changes.
//
// It stands above the status engine: the engine reports each resource as a
// status.Entry (key, payload, digest of what counts as a change) and knows
// nothing of who listens; notify adapts those entries. The parts:
//
//   - Manager owns the subscriptions (SPEC section 8): one durable Worker per
//     subscription, change routing by group (appcontext.Cache tells it
//     which groups a batch of etcd events touched), a status memo shared by
//     every subscription to the same subject and filters, and Watch, which
//     follows a subject for a ?watch=true stream. (The AAI sink, package
//     aai, mirrors instances with the same Worker and States.)
//
//   - With several replicas each subscription's worker runs on one replica
//     (Claims, ownership.Kind). Subscriptions live in
//     MongoDB, which cannot be watched, so each has a marker in etcd
//     (shared.go): a create or change writes a new generation, the owner
//     restarts the worker for it and acknowledges once it has its
//     baseline, and the API waits for that. Delivery states are saved under
//     the owner's claim, the delivered digests one etcd value per cluster
//     (states.go), so a change writes what it touched, not the subject. Watch (SSE) runs on the replica the client talks to.
//
//   - Diff computes semantic deltas against per-resource digests of the last
//     delivered state, so resourceVersion and managedFields churn is never a
//     change.
//
//   - Deliverer sends signed webhooks: one shared http.Client, a timeout per
//     attempt, bodies drained and closed, 2xx done, 408/429/5xx/network
//     errors retried with capped exponential backoff and jitter, other 4xx
//     failed, redirects never followed.
//
//   - The callback policy: loopback, link-local, unspecified, broadcast,
//     multicast, cloud metadata and the orchestrator's own addresses are
//     refused unless --callback-allow names them, --callback-deny refuses
//     more, and the check runs when a subscription is made and again in the
//     dialer on the address actually connected to, so DNS cannot be used to
//     slip past it. What a subscription shows of an attempt (Reason) is a
//     status code or a short reason, never a body.
//
//     d, err := notify.NewDeliverer(notify.DelivererOptions{Allow: []string{"127.0.0.1"}})
//     res := d.Deliver(ctx, notify.Delivery{URL: u, ID: id, Sequence: 7, Body: payload, Secret: s})
package notify
