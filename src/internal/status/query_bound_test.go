package status

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/argus-mc/argus/src/internal/appcontext"
	"github.com/argus-mc/argus/src/internal/cluster"
	"github.com/argus-mc/argus/src/internal/errdefs"
)

// TestQueryReadsABoundedAnswer: /v1/query returns what it reads from the
// cluster, so it reads less than other requests may: a cluster that
// answers a list without end costs 16 MiB and a 503 asking to narrow the
// query.
func TestQueryReadsABoundedAnswer(t *testing.T) {
	var sent atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/api":
			_, _ = w.Write([]byte(`{"kind":"APIVersions","versions":["v1"]}`))
		case "/apis":
			_, _ = w.Write([]byte(`{"kind":"APIGroupList","apiVersion":"v1","groups":[]}`))
		case "/api/v1":
			_, _ = w.Write([]byte(`{"kind":"APIResourceList","groupVersion":"v1","resources":[{"name":"configmaps","namespaced":true,"kind":"ConfigMap","verbs":["list"]}]}`))
		default:
			_, _ = w.Write([]byte(`{"kind":"ConfigMapList","apiVersion":"v1","items":[`))
			item := []byte(strings.Repeat(`{"metadata":{"name":"x"}},`, 4000))
			for sent.Load() < 1<<30 {
				n, err := w.Write(item)
				sent.Add(int64(n))
				if err != nil {
					return
				}
			}
		}
	}))
	defer srv.Close()
	kc := "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: " + srv.URL + "}}]\n" +
		"users: [{name: u, user: {token: t}}]\ncontexts: [{name: x, context: {cluster: c, user: u}}]\ncurrent-context: x\n"
	reg := cluster.NewRegistry(cluster.Options{Kubeconfig: func(context.Context, appcontext.ClusterRef) ([]byte, error) { return []byte(kc), nil }})
	q, err := parseV1Query(url.Values{"ApiVersion": {"v1"}, "Kind": {"ConfigMap"}})
	if err != nil {
		t.Fatal(err)
	}
	_, err = (&Reader{Clusters: reg}).list(context.Background(), appcontext.ClusterRef{Provider: appcontext.V1Provider, Name: "r1"}, q)
	if !errors.Is(err, errdefs.ErrUnavailable) || !strings.Contains(err.Error(), "narrow the query") {
		t.Fatalf("err = %v", err)
	}
	if n := sent.Load(); n > 64<<20 {
		t.Fatalf("the cluster sent %d bytes before the query gave up", n)
	}
}
