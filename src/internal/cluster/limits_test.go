package cluster

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/argus-mc/argus/src/internal/appcontext"
	"github.com/argus-mc/argus/src/internal/errdefs"
)

// hostile is an "API server" a caller registered: it answers every request
// with what answer says, counting the bytes it manages to send.
func hostile(t *testing.T, answer func(w http.ResponseWriter, r *http.Request)) (*Client, *atomic.Int64) {
	t.Helper()
	var sent atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		answer(&countingWriter{ResponseWriter: w, n: &sent}, r)
	}))
	t.Cleanup(srv.Close)
	kc := "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: " + srv.URL + "}}]\n" +
		"users: [{name: u, user: {token: t}}]\ncontexts: [{name: x, context: {cluster: c, user: u}}]\ncurrent-context: x\n"
	reg := NewRegistry(Options{MaxResponse: 1 << 20, Kubeconfig: func(context.Context, appcontext.ClusterRef) ([]byte, error) {
		return []byte(kc), nil
	}})
	c, err := reg.Client(context.Background(), appcontext.ClusterRef{Provider: "cp", Name: "evil"})
	if err != nil {
		t.Fatal(err)
	}
	return c, &sent
}

type countingWriter struct {
	http.ResponseWriter
	n *atomic.Int64
}

func (w *countingWriter) Write(b []byte) (int, error) {
	n, err := w.ResponseWriter.Write(b)
	w.n.Add(int64(n))
	return n, err
}

// endless writes chunks of b until the client stops reading (or 1 GiB).
func endless(w http.ResponseWriter, b []byte) {
	for sent := 0; sent < 1<<30; sent += len(b) {
		if _, err := w.Write(b); err != nil {
			return
		}
	}
}

var configMaps = schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}

// TestClusterAnswersAreBounded: a cluster that answers without end (a
// registered "API server" of the caller's) costs a bounded read and an
// error, not the orchestrator's memory; before, client-go read every byte.
func TestClusterAnswersAreBounded(t *testing.T) {
	chunk := []byte(`{"kind":"ConfigMapList","items":[` + strings.Repeat(`{"metadata":{"name":"x"}},`, 2000))
	t.Run("list", func(t *testing.T) {
		c, sent := hostile(t, func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			endless(w, chunk)
		})
		_, err := c.Dynamic.Resource(configMaps).Namespace("default").List(context.Background(), metav1.ListOptions{})
		if err == nil || !errors.Is(err, errdefs.ErrUnavailable) || !strings.Contains(err.Error(), "larger than 1048576 bytes") {
			t.Fatalf("err = %v, want the answer refused as too large", err)
		}
		// What the kernel buffers on loopback comes on top of the bound.
		if n := sent.Load(); n > 64<<20 {
			t.Fatalf("the server sent %d bytes before the client gave up", n)
		}
	})
	t.Run("declared length", func(t *testing.T) {
		c, _ := hostile(t, func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Content-Length", "4294967296")
			_, _ = w.Write(chunk)
		})
		_, err := c.Dynamic.Resource(configMaps).Namespace("default").Get(context.Background(), "x", metav1.GetOptions{})
		if err == nil || !strings.Contains(err.Error(), "larger than") {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("watch event", func(t *testing.T) {
		c, sent := hostile(t, func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusOK)
			_, _ = w.Write([]byte(`{"type":"ADDED","object":{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"`))
			endless(w, []byte(strings.Repeat("x", 64<<10)))
		})
		wi, err := c.Dynamic.Resource(configMaps).Namespace("default").Watch(context.Background(), metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		defer wi.Stop()
		for range wi.ResultChan() { // ends when the event is cut off
		}
		if n := sent.Load(); n > MaxWatchEvent+64<<20 {
			t.Fatalf("the server sent %d bytes of one event", n)
		}
	})
}

// TestWatchBoundIsPerEvent: a long watch carries any number of events; only
// one event longer than the bound ends it.
func TestWatchBoundIsPerEvent(t *testing.T) {
	req, _ := http.NewRequest(http.MethodGet, "http://c/api/v1/configmaps?watch=true", nil)
	event := strings.Repeat("e", 90) + "\n"
	b := &boundedBody{rc: io.NopCloser(strings.NewReader(strings.Repeat(event, 10000))), req: req, max: 100, watch: true}
	if n, err := io.Copy(io.Discard, b); err != nil || n != int64(len(event)*10000) {
		t.Fatalf("copied %d, %v", n, err)
	}
	long := strings.Repeat(event, 3) + strings.Repeat("l", 150) + "\n" + event
	b = &boundedBody{rc: io.NopCloser(strings.NewReader(long)), req: req, max: 100, watch: true}
	if _, err := io.Copy(io.Discard, b); err == nil || !strings.Contains(err.Error(), "watch event") {
		t.Fatalf("a 151-byte event passed a 100-byte bound: %v", err)
	}
	// Split across reads, an event is still counted whole.
	b = &boundedBody{rc: io.NopCloser(&oneByteReader{strings.NewReader(strings.Repeat("s", 101) + "\n")}), req: req, max: 100, watch: true}
	if _, err := io.Copy(io.Discard, b); err == nil {
		t.Fatal("an event read a byte at a time passed the bound")
	}
}

type oneByteReader struct{ r io.Reader }

func (o *oneByteReader) Read(p []byte) (int, error) { return o.r.Read(p[:min(1, len(p))]) }

// TestForeignErrorBodiesAreNotShown: a kubeconfig may point at any HTTP
// service; what it answers to the requests Argus makes must not come back
// to the caller in an error message (client-go quotes text answers).
func TestForeignErrorBodiesAreNotShown(t *testing.T) {
	c, _ := hostile(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/api/v1/namespaces/default/configmaps/status" {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusNotFound)
			_, _ = w.Write([]byte(`{"kind":"Status","apiVersion":"v1","status":"Failure","message":"configmaps \"status\" not found","reason":"NotFound","code":404}`))
			return
		}
		w.Header().Set("Content-Type", "text/html")
		w.WriteHeader(http.StatusForbidden)
		_, _ = w.Write([]byte("<h1>internal admin</h1> db-password=hunter2"))
	})
	_, err := c.Dynamic.Resource(configMaps).Namespace("default").Get(context.Background(), "x", metav1.GetOptions{})
	if err == nil || strings.Contains(err.Error(), "hunter2") || !strings.Contains(err.Error(), "not a Kubernetes API answer (text/html") {
		t.Fatalf("err = %v", err)
	}
	// An API server's own Status still says what went wrong.
	_, err = c.Dynamic.Resource(configMaps).Namespace("default").Get(context.Background(), "status", metav1.GetOptions{})
	if err == nil || !strings.Contains(err.Error(), `configmaps "status" not found`) {
		t.Fatalf("err = %v", err)
	}
}

// FuzzBoundedBody: whatever a cluster sends, the bounded body passes at
// most max bytes of an answer (of a watch event, counting from its last
// newline) and never more than it was given.
func FuzzBoundedBody(f *testing.F) {
	f.Add([]byte("{\"a\":1}\n{\"b\":2}\n"), uint8(8), true)
	f.Add([]byte(strings.Repeat("x", 300)), uint8(100), false)
	f.Add([]byte("\n\n\nxxxxxxxxxxxxxxxxxxxxxxxxxxxx"), uint8(3), true)
	f.Fuzz(func(t *testing.T, data []byte, limit uint8, watch bool) {
		req, _ := http.NewRequest(http.MethodGet, "http://c/api?watch="+map[bool]string{true: "true", false: "false"}[watch], nil)
		b := &boundedBody{rc: io.NopCloser(&oneByteReader{strings.NewReader(string(data))}), req: req, max: int64(limit), watch: watch}
		got, err := io.ReadAll(b)
		if !strings.HasPrefix(string(data), string(got)) {
			t.Fatalf("read %q, not a prefix of the input", got)
		}
		longest, run := 0, 0
		for _, c := range got {
			if c == '\n' {
				run = 0
				continue
			}
			run++
			longest = max(longest, run)
		}
		switch {
		case !watch && int64(len(got)) > int64(limit):
			t.Fatalf("passed %d bytes over a %d-byte bound", len(got), limit)
		case watch && int64(longest) > int64(limit):
			t.Fatalf("passed an event of %d bytes over a %d-byte bound", longest, limit)
		case err == nil && len(got) != len(data):
			t.Fatalf("stopped early without an error")
		case err != nil && !errors.Is(err, ErrAnswerTooLarge):
			t.Fatalf("err = %v", err)
		}
	})
}
