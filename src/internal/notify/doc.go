// Package notify tells subscribers when a status answer changes.
//
// This first part is the delivery core, pure or self-contained: semantic
// deltas (Diff, against per-resource digests of the last delivered state, so
// resourceVersion and managedFields churn is never a change), signed
// webhook delivery (Deliverer: one shared http.Client, a timeout per
// attempt, bodies drained and closed, 2xx done, 408/429/5xx/network errors
// retried, other 4xx failed), capped exponential backoff with jitter, and
// callback URL checks against an allow-list of hosts and CIDRs, enforced
// again at dial time so DNS cannot be used to slip past it.
//
//	d := notify.NewDeliverer(notify.DelivererOptions{})
//	res := d.Deliver(ctx, notify.Delivery{URL: u, ID: id, Sequence: 7, Body: payload, Secret: s})
package notify
