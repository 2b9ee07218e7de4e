// Package console is Argus's web console: one page of plain HTML, CSS and
// JavaScript, embedded in the orchestrator binary (no CDN, no build step,
// so it works air-gapped), served at / with its files under /console/.
//
// The page holds no data. It asks for the API's bearer token once, keeps
// it in the browser session (sessionStorage), and sends it in the
// Authorization header of every API call; it follows changes over the
// API's Server-Sent Events streams read with fetch, since EventSource
// cannot send headers, so the token never appears in a URL or a log.
// docs/console.md says what each view shows.
//
//	h := console.Handler()
//	api.New(api.Options{..., Console: h})
package console
