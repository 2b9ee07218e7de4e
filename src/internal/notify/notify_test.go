package notify

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/argus-mc/argus/src/internal/errdefs"
	"github.com/argus-mc/argus/src/internal/testenv"
)

var env *testenv.Stores

func TestMain(m *testing.M) { testenv.Main(m, func(s *testenv.Stores) { env = s }) }

func TestDigestIgnoresChurn(t *testing.T) {
	a := Digest("Ready", "", "Applied", "Present", json.RawMessage(`{"readyReplicas":2,"replicas":2}`))
	b := Digest("Ready", "", "Applied", "Present", json.RawMessage(`{ "replicas": 2, "readyReplicas": 2 }`))
	if a != b {
		t.Fatal("key order or spacing of .status changed the digest")
	}
	for name, other := range map[string]string{
		"readiness": Digest("Pending", "1 of 2", "Applied", "Present", json.RawMessage(`{"readyReplicas":2,"replicas":2}`)),
		"status":    Digest("Ready", "", "Applied", "Present", json.RawMessage(`{"readyReplicas":1,"replicas":2}`)),
		"rsync":     Digest("Ready", "", "Retrying", "Present", json.RawMessage(`{"readyReplicas":2,"replicas":2}`)),
	} {
		if other == a {
			t.Errorf("a change of %s left the digest unchanged", name)
		}
	}
}

func TestDiffAgainstLastDelivered(t *testing.T) {
	e := func(key, digest string) Entry {
		return Entry{Key: key, Digest: digest, Payload: map[string]any{"name": key}}
	}
	last := map[string]string{"a": "1", "b": "1", "c": "1"}
	ch, next := Diff(last, []Entry{e("a", "1"), e("b", "2"), e("d", "1")}, func(key string) map[string]any {
		return map[string]any{"name": key, "gone": true}
	})
	if len(ch.Created) != 1 || ch.Created[0]["name"] != "d" || len(ch.Modified) != 1 || ch.Modified[0]["name"] != "b" ||
		len(ch.Deleted) != 1 || ch.Deleted[0]["name"] != "c" || ch.Deleted[0]["gone"] != true {
		t.Fatalf("changes = %+v", ch)
	}
	if len(next) != 3 || next["b"] != "2" {
		t.Fatalf("next = %v", next)
	}
	// A burst that returns to the delivered state is no change at all.
	if ch, _ := Diff(next, []Entry{e("a", "1"), e("b", "2"), e("d", "1")}, nil); !ch.Empty() {
		t.Fatalf("no net change, got %+v", ch)
	}
}

func TestDeliverHeadersSignatureAndOutcomes(t *testing.T) {
	var code atomic.Int64
	code.Store(200)
	got := make(chan *http.Request, 10)
	var bodies [][]byte
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		bodies = append(bodies, b)
		got <- r
		w.WriteHeader(int(code.Load()))
	}))
	defer srv.Close()
	d, err := NewDeliverer(DelivererOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ts := time.Unix(1700000000, 0)
	del := Delivery{URL: srv.URL, ID: "d-1", Sequence: 7, Timestamp: ts, Body: []byte(`{"ready":true}`), Secret: "s3cret"}
	for c, want := range map[int]Outcome{200: Delivered, 204: Delivered, 500: Retry, 503: Retry, 429: Retry, 408: Retry, 400: Failed, 404: Failed, 302: Failed} {
		code.Store(int64(c))
		res := d.Deliver(context.Background(), del)
		if res.Outcome != want || res.Status != c {
			t.Errorf("status %d: outcome %s (%d), want %s", c, res.Outcome, res.Status, want)
		}
		r := <-got
		if r.Header.Get(HeaderDelivery) != "d-1" || r.Header.Get(HeaderSequence) != "7" || r.Header.Get(HeaderTimestamp) != strconv.FormatInt(ts.Unix(), 10) {
			t.Fatalf("headers = %v", r.Header)
		}
		if r.Header.Get(HeaderSignature) != Sign("s3cret", ts.Unix(), []byte(`{"ready":true}`)) {
			t.Fatalf("signature = %q", r.Header.Get(HeaderSignature))
		}
	}
	// The same frozen payload every time.
	for _, b := range bodies {
		if string(b) != `{"ready":true}` {
			t.Fatalf("body = %s", b)
		}
	}
	del.Secret = ""
	code.Store(200)
	d.Deliver(context.Background(), del)
	if r := <-got; r.Header.Get(HeaderSignature) != "" {
		t.Fatal("signed without a secret")
	}
}

func TestDeliverTimesOutAndRetries(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { <-release }))
	defer srv.Close()
	defer close(release)
	d, _ := NewDeliverer(DelivererOptions{AttemptTimeout: 200 * time.Millisecond})
	start := time.Now()
	res := d.Deliver(context.Background(), Delivery{URL: srv.URL, ID: "x", Sequence: 1, Timestamp: time.Now(), Body: []byte("{}")})
	if res.Outcome != Retry || res.Err == nil || time.Since(start) > 5*time.Second {
		t.Fatalf("hanging receiver: %+v after %s", res, time.Since(start))
	}
	d.client.CloseIdleConnections()
}

func TestAllowList(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer srv.Close()
	ctx := context.Background()
	open, _ := NewDeliverer(DelivererOptions{})
	for _, bad := range []string{"ftp://host/x", "/relative", "http://", "not a url"} {
		if err := open.CheckURL(ctx, bad); !errors.Is(err, errdefs.ErrInvalid) {
			t.Errorf("CheckURL(%q) = %v", bad, err)
		}
	}
	if err := open.CheckURL(ctx, srv.URL); err != nil {
		t.Fatalf("empty allow-list refused %s: %v", srv.URL, err)
	}
	strict, _ := NewDeliverer(DelivererOptions{Allow: []string{"10.0.0.0/8", "*.example.com"}})
	if err := strict.CheckURL(ctx, srv.URL); !errors.Is(err, errdefs.ErrInvalid) {
		t.Fatalf("loopback outside the allow-list accepted: %v", err)
	}
	if err := strict.CheckURL(ctx, "https://hooks.example.com/x"); err != nil {
		t.Fatalf("allowed host refused: %v", err)
	}
	// Enforced again at dial time: a delivery to a refused address fails for good.
	res := strict.Deliver(ctx, Delivery{URL: srv.URL, ID: "x", Sequence: 1, Timestamp: time.Now(), Body: []byte("{}")})
	if res.Outcome != Failed || !errors.Is(res.Err, ErrNotAllowed) {
		t.Fatalf("dial outside the allow-list: %+v", res)
	}
	loop, _ := NewDeliverer(DelivererOptions{Allow: []string{"127.0.0.0/8"}})
	if err := loop.CheckURL(ctx, srv.URL); err != nil {
		t.Fatalf("allowed CIDR refused: %v", err)
	}
	if res := loop.Deliver(ctx, Delivery{URL: srv.URL, ID: "x", Sequence: 1, Timestamp: time.Now(), Body: []byte("{}")}); res.Outcome != Delivered {
		t.Fatalf("allowed delivery: %+v", res)
	}
	// A host the allow-list names is delivered to wherever it resolves.
	named, _ := NewDeliverer(DelivererOptions{Allow: []string{"localhost"}})
	local := strings.Replace(srv.URL, "127.0.0.1", "localhost", 1)
	if err := named.CheckURL(ctx, local); err != nil {
		t.Fatalf("named host refused: %v", err)
	}
	if res := named.Deliver(ctx, Delivery{URL: local, ID: "x", Sequence: 1, Timestamp: time.Now(), Body: []byte("{}")}); res.Outcome != Delivered {
		t.Fatalf("delivery to a named host: %+v", res)
	}
	if res := named.Deliver(ctx, Delivery{URL: srv.URL, ID: "x", Sequence: 1, Timestamp: time.Now(), Body: []byte("{}")}); res.Outcome != Failed {
		t.Fatalf("the same address by another name is not allowed: %+v", res)
	}
	for _, d := range []*Deliverer{open, strict, loop, named} {
		d.client.CloseIdleConnections()
	}
}

func TestBackoff(t *testing.T) {
	for attempt, bounds := range map[int][2]time.Duration{1: {500 * time.Millisecond, time.Second}, 3: {2 * time.Second, 4 * time.Second}, 10: {30 * time.Second, 60 * time.Second}} {
		for range 50 {
			if d := Backoff(attempt); d < bounds[0] || d > bounds[1] {
				t.Fatalf("Backoff(%d) = %s, want within %v", attempt, d, bounds)
			}
		}
	}
}
