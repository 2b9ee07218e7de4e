// Package notify tells subscribers when a status answer changes.
//
// It stands above the status engine: the engine reports each resource as a
// status.Entry (key, payload, digest of what counts as a change) and knows
// nothing of who listens; notify adapts those entries. The parts:
//
//   - Manager owns the subscriptions (SPEC section 8): one durable Worker per
//     subscription, change routing by group (appcontext.Cache tells it
//     which groups a batch of etcd events touched), a status memo shared by
//     every subscription to the same subject and filters, the AAI sink, and
//     Watch, which follows a subject for a ?watch=true stream.
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
