package api

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/argus-mc/argus/src/internal/catalog"
	"github.com/argus-mc/argus/src/internal/status"
)

// bigStatus answers every DIG with n resources, each with a detail of
// size bytes.
type bigStatus struct {
	stubStatus
	n, size int
}

func (b bigStatus) DIG(context.Context, catalog.Key, url.Values) (any, error) {
	c := status.Cluster{ClusterProvider: "cp", Cluster: "c1"}
	detail, _ := json.Marshal(map[string]string{"data": strings.Repeat("x", b.size)})
	for i := range b.n {
		c.Resources = append(c.Resources, status.Resource{Name: fmt.Sprintf("cm-%d", i), GVK: status.GVK{Version: "v1", Kind: "ConfigMap"}, Detail: detail})
	}
	return status.Response{Header: status.Header{Name: "dig"}, Apps: []status.App{{Name: "app", Clusters: []status.Cluster{c}}}}, nil
}

// A status answer is written as it is encoded, under the answer budget: a
// client that reads it gets all of it, one that stops reading is cut off
// once a write makes no progress for AnswerWriteTimeout, and what it held
// goes back to the budget.
func TestAnswersAreStreamedAndSlowReadersCut(t *testing.T) {
	f := newFixtureWith(t, func(o *Options) {
		o.Status, o.AnswerWriteTimeout = bigStatus{n: 200, size: 100 << 10}, 500*time.Millisecond // 20 MB
	})
	path := "/v2/projects/p/composite-apps/ca/v1/deployment-intent-groups/dig/status?output=detail"
	code, body, _ := f.do(t, "GET", path, "")
	var got status.Response
	if code != 200 || json.Unmarshal([]byte(body), &got) != nil || len(got.Apps[0].Clusters[0].Resources) != 200 {
		t.Fatalf("a reader's answer: %d, %d bytes", code, len(body))
	}
	conn, err := net.Dial("tcp", strings.TrimPrefix(f.srv.URL, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "GET %s HTTP/1.1\r\nHost: x\r\n\r\n", path)
	// Reads nothing: the server's writes stop making progress and it cuts
	// the connection, giving the answer's reservation back.
	waitFor(t, func() bool {
		_, m, _ := f.do(t, "GET", "/metrics", "")
		return strings.Contains(m, `argus_http_requests_total{code="200",method="GET",route="/v2/projects/{project}/composite-apps/{compositeApp}/{version}/deployment-intent-groups/{deploymentIntentGroup}/status"} 2`)
	})
	waitFor(t, func() bool {
		_, m, _ := f.do(t, "GET", "/metrics", "")
		return strings.Contains(m, "argus_http_answer_bytes_reserved 0")
	})
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	n, err := io.Copy(io.Discard, resp.Body)
	if err == nil || n >= int64(len(body)) {
		t.Fatalf("the reader that stopped got %d of %d bytes, err %v: it was not cut", n, len(body), err)
	}
	t.Logf("the reader that stopped was cut after %d of %d bytes", n, len(body))
}

// An answer marshalled whole that is larger than the whole answer budget
// is refused with 413 naming how to ask for less, before any of it is
// written.
func TestAnswersLargerThanTheBudgetAreRefused(t *testing.T) {
	f := newFixtureWith(t, func(o *Options) { o.MaxAnswerMemory = 256 << 10 })
	for i := range 10 {
		body := fmt.Sprintf(`{"metadata":{"name":"p%d","description":%q}}`, i, strings.Repeat("d", 40<<10))
		if code, got, _ := f.do(t, "POST", "/v2/projects", body); code != 201 {
			t.Fatalf("project %d: %d %.200s", i, code, got)
		}
	}
	code, body, _ := f.do(t, "GET", "/v2/projects", "")
	if code != http.StatusRequestEntityTooLarge || !strings.Contains(body, "?limit=") {
		t.Fatalf("a 400 KB list under a 256 KiB budget: %d %.300s", code, body)
	}
	if code, _, _ := f.do(t, "GET", "/v2/projects?limit=2", ""); code != 200 {
		t.Fatalf("a page of it: %d", code)
	}
}
