package receiver

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/argus-mc/argus/src/internal/logging"
)

// Options configures a Receiver.
type Options struct {
	// Listen is the address to serve on; "" means 127.0.0.1:0 (a free port).
	Listen string
	// Out receives one record per notification; required.
	Out io.Writer
	// Logger; nil discards.
	Logger *logrus.Entry
	// MaxBody bounds a notification's size; 0 means 64 MiB.
	MaxBody int64
	// Now stamps records; nil means time.Now.
	Now func() time.Time
}

// Receiver accepts notifications and records them. Create it with New.
type Receiver struct {
	opts Options
	ln   net.Listener

	mu    sync.Mutex // serialises records on Out and guards count
	count int
}

// New validates opts and starts listening, so Addr is known before Run.
func New(opts Options) (*Receiver, error) {
	if opts.Out == nil {
		return nil, errors.New("receiver: Options.Out is required")
	}
	if opts.Listen == "" {
		opts.Listen = "127.0.0.1:0"
	}
	if opts.Logger == nil {
		opts.Logger = logrus.NewEntry(logging.Discard())
	}
	if opts.MaxBody == 0 {
		opts.MaxBody = 64 << 20
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	ln, err := net.Listen("tcp", opts.Listen)
	if err != nil {
		return nil, fmt.Errorf("receiver: listen on %s: %w", opts.Listen, err)
	}
	return &Receiver{opts: opts, ln: ln}, nil
}

// Addr is the address the receiver listens on.
func (r *Receiver) Addr() net.Addr { return r.ln.Addr() }

// Received is the number of notifications recorded so far.
func (r *Receiver) Received() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.count
}

// Run serves until ctx ends, then stops accepting and waits briefly for
// requests in flight.
func (r *Receiver) Run(ctx context.Context) error {
	srv := &http.Server{Handler: r.Handler(), ReadHeaderTimeout: 10 * time.Second}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(r.ln) }()
	r.opts.Logger.WithField("addr", r.Addr().String()).Info("receiver listening")
	select {
	case err := <-served:
		return fmt.Errorf("receiver: serve: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return fmt.Errorf("receiver: shut down: %w", err)
	}
	if err := <-served; !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("receiver: serve: %w", err)
	}
	return nil
}

// Handler answers GET /healthz, and records every POST (any path) with 204.
func (r *Receiver) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
	mux.HandleFunc("POST /", r.receive)
	return mux
}

func (r *Receiver) receive(w http.ResponseWriter, req *http.Request) {
	body, err := io.ReadAll(http.MaxBytesReader(w, req.Body, r.opts.MaxBody))
	if err != nil {
		r.opts.Logger.WithError(err).Warn("reading a notification")
		http.Error(w, "cannot read the body: "+err.Error(), http.StatusBadRequest)
		return
	}
	r.mu.Lock()
	r.count++
	record := Format(r.count, r.opts.Now(), req, body)
	_, err = r.opts.Out.Write(record)
	r.mu.Unlock()
	if err != nil {
		// Answer 500 so that the sender retries: the record was not kept.
		r.opts.Logger.WithError(err).Error("writing a notification record")
		http.Error(w, "cannot record the notification", http.StatusInternalServerError)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// Format renders one notification as a readable record:
//
//	=== notification 3 at 2026-01-02T10:00:00Z: POST /notify
//	X-Argus-Sequence: 3
//	ready: false; changes: 0 created, 0 deleted, 1 modified
//	  modified  Pod default/backend-7d4-x2x  app=backend cluster=cp+cluster1  ready-status=Pending  reason="..."
//	{ ...the body, indented... }
//
// The change lines come first so that a reader (or a script's grep) sees
// what happened without reading the whole status document.
func Format(n int, at time.Time, req *http.Request, body []byte) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, "=== notification %d at %s: %s %s\n", n, at.UTC().Format(time.RFC3339), req.Method, req.URL.RequestURI())
	var names []string
	for name := range req.Header {
		if strings.HasPrefix(name, "X-Argus-") {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	for _, name := range names {
		fmt.Fprintf(&b, "%s: %s\n", name, strings.Join(req.Header[name], ", "))
	}

	var doc struct {
		Ready   *bool `json:"ready"`
		Changes *struct {
			Created  []map[string]any `json:"created"`
			Deleted  []map[string]any `json:"deleted"`
			Modified []map[string]any `json:"modified"`
		} `json:"resource-changes"`
	}
	var pretty bytes.Buffer
	if err := json.Unmarshal(body, &doc); err != nil || json.Indent(&pretty, body, "", "  ") != nil {
		fmt.Fprintf(&b, "body (not JSON: %v):\n%s\n\n", err, body)
		return b.Bytes()
	}
	if doc.Ready != nil {
		fmt.Fprintf(&b, "ready: %t; ", *doc.Ready)
	}
	if c := doc.Changes; c != nil {
		fmt.Fprintf(&b, "changes: %d created, %d deleted, %d modified\n", len(c.Created), len(c.Deleted), len(c.Modified))
		for _, kind := range []struct {
			what    string
			entries []map[string]any
		}{{"created", c.Created}, {"deleted", c.Deleted}, {"modified", c.Modified}} {
			for _, e := range kind.entries {
				fmt.Fprintf(&b, "  %-8s  %s\n", kind.what, describe(e))
			}
		}
	} else {
		b.WriteString("no resource-changes\n")
	}
	b.Write(pretty.Bytes())
	b.WriteString("\n\n")
	return b.Bytes()
}

// describe summarises one resource-changes entry on one line.
func describe(e map[string]any) string {
	str := func(k string) string { s, _ := e[k].(string); return s }
	if key := str("key"); key != "" && str("name") == "" {
		return key // a deleted resource known only by its key
	}
	kind := ""
	if gvk, ok := e["GVK"].(map[string]any); ok {
		kind, _ = gvk["Kind"].(string)
	}
	name := str("name")
	if ns := str("namespace"); ns != "" {
		name = ns + "/" + name
	}
	parts := []string{strings.TrimSpace(kind + " " + name)}
	if app := str("app"); app != "" {
		parts = append(parts, "app="+app)
	}
	if cl := str("cluster"); cl != "" {
		if cp := str("cluster-provider"); cp != "" {
			cl = cp + "+" + cl
		}
		parts = append(parts, "cluster="+cl)
	}
	for _, k := range []string{"rsync-status", "cluster-status", "ready-status"} {
		if v := str(k); v != "" {
			parts = append(parts, k+"="+v)
		}
	}
	if r := str("reason"); r != "" {
		parts = append(parts, fmt.Sprintf("reason=%q", r))
	}
	return strings.Join(parts, "  ")
}
