// Package client is a Go client of Argus's REST API as the argus command
// uses it: a deployment intent group's or v1 instance's status, its
// history, its change stream (Server-Sent Events, resumed with
// Last-Event-ID after a break), the overview, the clusters and sync. It
// decodes answers into the API's own types (status.Response,
// history.Entry, …), so it says what the server says.
//
// Answers are bounded (MaxAnswer, MaxEvent) and every request but a
// stream has a timeout; the bearer token goes in a header, never a URL.
//
//	c, _ := client.New(client.Options{Server: "http://127.0.0.1:9015", Token: token})
//	ref, _ := client.ParseRef("demo/shop/v1/shop")
//	st, raw, err := c.DIGStatus(ctx, ref, url.Values{"type": {"cluster"}})
package client
