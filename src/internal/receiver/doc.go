// Package receiver is a webhook endpoint for Argus's status notifications,
// for the demo and for people trying subscriptions out by hand: it accepts
// every POST, answers 204, and appends a readable record of it — the
// X-Argus-* headers, one line per resource change, then the pretty-printed
// body — to a writer.
//
//	rc, err := receiver.New(receiver.Options{Listen: "127.0.0.1:9018", Out: os.Stdout})
//	if err != nil { ... }
//	err = rc.Run(ctx) // serves until ctx ends
//
// It is not a production receiver: it verifies no signature and keeps
// nothing but the log it writes.
package receiver
