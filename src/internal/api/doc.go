// Package api is Argus's HTTP interface: the EMCO-style v2 and
// k8splugin-style v1 REST routes on gorilla/mux, plus /healthz, /readyz and
// /metrics, behind one middleware chain (request id, structured access log,
// Prometheus metrics, panic recovery, body limits, and — when Options.Tokens
// is set — bearer-token authentication of everything but /healthz and
// /readyz). docs/api/openapi.yaml describes every route; a test keeps the two
// in step.
//
// Handlers return errors; writeError maps the errdefs kinds to HTTP status in
// exactly one function (statusFor), and writes EMCO-style text bodies.
//
//	h, err := api.New(api.Options{Catalog: cat, Checks: checks, Registerer: reg})
//	http.ListenAndServe(":9015", h)
package api
