// Package notify tells subscribers when a status answer changes.
//
// This first part is the delivery core, pure or self-contained: semantic
// deltas (Diff, against per-resource digests of the last delivered state, so
// resourceVersion and managedFields churn is never a change), signed
// webhook delivery (Deliverer: one shared http.Client, a timeout per
// attempt, bodies drained and closed, 2xx done, 408/429/5xx/network errors
// retried, other 4xx failed, redirects never followed), capped exponential
// backoff with jitter, and the callback policy: loopback, link-local,
// unspecified, broadcast, multicast, cloud metadata and the orchestrator's
// own addresses are refused unless --callback-allow names them,
// --callback-deny refuses more, and the check runs when a subscription is
// made and again in the dialer on the address actually connected to, so
// DNS cannot be used to slip past it. What a subscription shows of an
// attempt (Reason) is a status code or a short reason, never a body.
//
//	d, err := notify.NewDeliverer(notify.DelivererOptions{Allow: []string{"127.0.0.1"}})
//	res := d.Deliver(ctx, notify.Delivery{URL: u, ID: id, Sequence: 7, Body: payload, Secret: s})
package notify
