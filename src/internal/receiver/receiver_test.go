package receiver

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// syncBuffer is an io.Writer the test may read while the server writes.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.String()
}

const notification = `{"name":"dig","ready":false,"ready-status":{"Pending":2,"Ready":20},
 "resource-changes":{"created":[],"deleted":[{"key":"Pod/default/old"}],"modified":[
  {"app":"backend","cluster-provider":"cp","cluster":"cluster1","namespace":"default",
   "GVK":{"Group":"","Version":"v1","Kind":"Pod"},"name":"backend-5d-abc",
   "rsync-status":"","cluster-status":"Present","ready-status":"Pending","reason":"containers not ready: main"}]}}`

func TestRecordsNotificationsAndAnswers204(t *testing.T) {
	out := &syncBuffer{}
	at := time.Date(2026, 1, 2, 10, 0, 0, 0, time.UTC)
	rc, err := New(Options{Out: out, Now: func() time.Time { return at }})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- rc.Run(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	base := "http://" + rc.Addr().String()

	resp, err := http.Get(base + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("healthz: %d", resp.StatusCode)
	}

	post := func(body string, headers map[string]string) int {
		req, _ := http.NewRequest("POST", base+"/notify", strings.NewReader(body))
		for k, v := range headers {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := post(notification, map[string]string{"X-Argus-Sequence": "7", "X-Argus-Delivery": "d-1", "Authorization": "secret"}); code != 204 {
		t.Fatalf("POST: %d, want 204", code)
	}
	if code := post("not json", nil); code != 204 {
		t.Fatalf("POST of a non-JSON body: %d, want 204", code)
	}
	if n := rc.Received(); n != 2 {
		t.Fatalf("Received() = %d, want 2", n)
	}

	got := out.String()
	for _, want := range []string{
		"=== notification 1 at 2026-01-02T10:00:00Z: POST /notify\n",
		"X-Argus-Delivery: d-1\nX-Argus-Sequence: 7\n",
		"ready: false; changes: 0 created, 1 deleted, 1 modified\n",
		"  deleted   Pod/default/old\n",
		`  modified  Pod default/backend-5d-abc  app=backend  cluster=cp+cluster1  cluster-status=Present  ready-status=Pending  reason="containers not ready: main"` + "\n",
		"{\n  \"name\": \"dig\",\n",
		"=== notification 2 at",
		"body (not JSON",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("record lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "Authorization") {
		t.Errorf("record shows a header other than X-Argus-*:\n%s", got)
	}
}

func TestNewRefusesMissingOutAndBusyPort(t *testing.T) {
	if _, err := New(Options{}); err == nil {
		t.Error("New without Out: no error")
	}
	rc, err := New(Options{Out: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	defer rc.ln.Close()
	if _, err := New(Options{Out: io.Discard, Listen: rc.Addr().String()}); err == nil || !strings.Contains(err.Error(), "listen") {
		t.Errorf("New on a busy port: %v", err)
	}
}
