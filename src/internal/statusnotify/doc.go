// Package statusnotify serves EMCO's status notification gRPC service
// (src/apis/statusnotify: StatusRegister, StatusDeregister), which
// emcoctl watch and other EMCO clients use to follow the status of a
// deployment intent group, a cluster's network intents or a logical cloud.
//
// A registration is fed by the same change stream as the HTTP
// subscriptions and ?watch=true streams (the context cache's change
// notifications, through the notifier's per-group listeners): after each
// change of its subject the status is computed again with the
// registration's type, output and filters, turned into a notification as
// EMCO's servers do, and sent when it differs from the last one sent.
// Nothing polls. Unlike EMCO, the first notification is the current
// status, sent as soon as the registration is accepted.
//
// When the API requires bearer tokens, so does this service: the token
// travels as gRPC metadata "authorization: Bearer <token>" and is checked
// on a call's headers, before any message of it is read (a tap handle).
// Nothing waits on a client without a bound: a call's request message
// must come within RequestTimeout, each notification must be taken within
// SendTimeout, and a connection with no call in progress is closed after
// IdleTimeout. emcoctl watch sends no token (EMCO's service has none), so
// it works against an orchestrator without --auth-token-file.
package statusnotify
