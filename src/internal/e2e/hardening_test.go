package e2e

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/argus-mc/argus/src/internal/appcontext"
	"github.com/argus-mc/argus/src/internal/catalog"
	"github.com/argus-mc/argus/src/internal/orchestrator"
	"github.com/argus-mc/argus/src/internal/testenv"
)

// Issue 14, stream H1: what an API caller or a cluster sends is data, the
// callbacks it names cannot reach the orchestrator's host, and its bodies
// are bounded. The connection limits are proven against a real process in
// src/cmd/orchestrator (TestTrickledBodiesAreCut).

// execKubeconfig is a simulated cluster's kubeconfig whose user
// authenticates with an exec plugin that would create marker.
func execKubeconfig(t *testing.T, cluster, marker string) []byte {
	t.Helper()
	cfg, err := clientcmd.Load(sim.Cluster(cluster).Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range cfg.AuthInfos {
		u.Token = ""
		u.Exec = &clientcmdapi.ExecConfig{APIVersion: "client.authentication.k8s.io/v1", Command: "/bin/sh",
			Args:            []string{"-c", "touch " + marker + "; echo '{\"apiVersion\":\"client.authentication.k8s.io/v1\",\"kind\":\"ExecCredential\",\"status\":{\"token\":\"x\"}}'"},
			InteractiveMode: clientcmdapi.NeverExecInteractiveMode}
	}
	data, err := clientcmd.Write(*cfg)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func noMarker(t *testing.T, marker string) {
	t.Helper()
	if _, err := os.Stat(marker); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the kubeconfig's exec plugin ran (%s): %v", marker, err)
	}
}

// A kubeconfig with an exec plugin is refused on both APIs, naming the
// field; one written to the catalogue behind the API's back never runs
// either, and the cluster's status says why it is unusable.
func TestKubeconfigIsDataNeverCode(t *testing.T) {
	noClusters(t)
	o := startOrchestrator(t, testenv.UniqueName("kc"), "/"+testenv.UniqueName("kc"))
	marker := filepath.Join(t.TempDir(), "exec-ran")
	evil := execKubeconfig(t, "cluster1", marker)

	o.must(201, "POST", "/v2/cluster-providers", meta("cp"))
	if code, body := o.upload("/v2/cluster-providers/cp/clusters", meta("evil"), evil); code != 400 || !strings.Contains(body, "users[0].user.exec is not allowed") {
		t.Fatalf("v2 upload with an exec plugin: %d %s", code, body)
	}
	if code, body := o.upload("/v1/connectivity-info", map[string]any{"cloud-region": "evil", "cloud-owner": "o"}, evil); code != 400 || !strings.Contains(body, "users[0].user.exec is not allowed") {
		t.Fatalf("v1 upload with an exec plugin: %d %s", code, body)
	}
	noMarker(t, marker)

	// A good upload, then its stored kubeconfig replaced directly.
	o.uploadOK("/v2/cluster-providers/cp/clusters", meta("bad"), sim.Cluster("cluster1").Kubeconfig)
	ctx := context.Background()
	if err := catalog.For[catalog.Empty](o.catalog, catalog.Clusters).PutContent(ctx, catalog.Key{"cp", "bad"}, evil); err != nil {
		t.Fatal(err)
	}
	base := "/v2/cluster-providers/cp/clusters/bad"
	o.must(201, "POST", base+"/networks", obj("net1", map[string]any{"cniType": "ovn4nfv",
		"ipv4Subnets": []any{map[string]any{"name": "subnet1", "subnet": "172.16.33.0/24", "gateway": "172.16.33.1/24"}}}))
	o.must(202, "POST", base+"/apply", nil)
	st, err := o.catalog.GetState(ctx, catalog.ClusterGroup("cp", "bad"))
	if err != nil {
		t.Fatal(err)
	}
	// rsync refuses to build a client, so the resource fails with the reason.
	o.waitContext(st.ContextID, "network resources Failed", func(c *appcontext.Context) (bool, string) {
		for _, p := range c.Placements {
			for _, r := range p.Resources {
				rs := p.StatusOf(r.Key())
				if rs.Status != appcontext.RsyncFailed || !strings.Contains(rs.Error, "users[0].user.exec is not allowed") {
					return false, rs.Status + " " + rs.Error
				}
			}
		}
		return len(c.Placements) > 0, "no placements"
	})
	// The watcher marks the cluster unusable; the status shows the reason.
	const why = "cluster unusable: cluster cp+bad: stored kubeconfig: users[0].user.exec is not allowed"
	waitFor(t, "the cluster status names the refused field", func() (bool, string) {
		_, body := o.call("GET", base+"/status?type=cluster", nil)
		return strings.Contains(body, why), body
	})
	noMarker(t, marker)
}

// Subscriptions to the orchestrator's host are refused by default, naming
// why (the link-local, multicast and private cases are unit-tested in
// src/internal/notify without dialing anything).
func TestCallbacksToThisHostAreRefused(t *testing.T) {
	noClusters(t)
	o := startOrchestrator(t, testenv.UniqueName("ssrf"), "/"+testenv.UniqueName("ssrf"))
	onboard(t, o, nil)
	subs := digPath + "/status/subscriptions"
	for url, why := range map[string]string{
		"http://127.0.0.1:2379/v3/kv/put": "127.0.0.1 is a loopback address",
		"http://0.0.0.0:9015/x":           "0.0.0.0 is an unspecified address",
		"http://[::1]:9015/x":             "::1 is a loopback address",
		"http://localhost:8080/x":         "is a loopback address",
		o.base + "/v2/projects":           "is the orchestrator's own address",
	} {
		code, body := o.call("POST", subs, map[string]any{"name": "s1", "callback-url": url})
		if code != 400 || !strings.Contains(body, why) {
			t.Errorf("%s: %d %s, want 400 naming %q", url, code, body, why)
		}
	}
	if code, body := o.call("GET", subs, nil); code != 200 || strings.TrimSpace(body) != "[]" {
		t.Fatalf("a refused subscription was stored: %d %s", code, body)
	}
}

// Bodies nested 5,000 deep are refused with 400 before any decoder
// recurses into them, on plain and subscription bodies alike.
func TestDeepJSONIsRefused(t *testing.T) {
	noClusters(t)
	o := startOrchestrator(t, testenv.UniqueName("deep"), "/"+testenv.UniqueName("deep"))
	deep := []byte(`{"metadata":{"name":"p1","x":` + strings.Repeat("[", 5000) + strings.Repeat("]", 5000) + `}}`)
	start := time.Now()
	if code, body := o.call("POST", "/v2/projects", deep); code != 400 || !strings.Contains(body, "deeper than 64") {
		t.Fatalf("5,000-deep project: %d %s", code, body)
	}
	t.Logf("5,000-deep body refused in %s", time.Since(start).Round(time.Millisecond))
	o.must(201, "POST", "/v2/projects", meta("p1"))
	sub := []byte(`{"name":"s","callback-url":"http://10.0.0.1/","metadata":` + strings.Repeat(`{"a":`, 5000) + `1` + strings.Repeat("}", 5000) + `}`)
	if code, body := o.call("POST", "/v1/instance/1/status/subscription", sub); code != 400 || !strings.Contains(body, "deeper than 64") {
		t.Fatalf("5,000-deep subscription: %d %s", code, body)
	}
}

// A watch stream outlives the server's read and write timeouts, which
// guard ordinary requests: here both are 2 s, and the stream still carries
// the changes of an instantiation started 5 s after it opened.
func TestWatchOutlivesServerTimeouts(t *testing.T) {
	sharedClusters(t)
	o := startOrchestrator(t, testenv.UniqueName("wto"), "/"+testenv.UniqueName("wto"), func(opts *orchestrator.Options) {
		// Short, but not shorter than an instantiate under -race on a
		// loaded machine takes to answer (a clean-clone run's took over
		// 2 s, and the server cut it: EOF).
		opts.HTTP = orchestrator.HTTPOptions{ReadHeaderTimeout: time.Second, ReadTimeout: 3 * time.Second, WriteTimeout: 6 * time.Second}
	})
	onboard(t, o, nil)
	events := o.watch(t, digPath+"/status?watch=true&type=rsync&output=summary")
	select {
	case ev := <-events:
		if ev.event != "snapshot" {
			t.Fatalf("first event %+v", ev)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no snapshot")
	}
	<-time.After(8 * time.Second) // the time passing is the point: past both timeouts
	o.must(202, "POST", digPath+"/approve", nil)
	o.must(202, "POST", digPath+"/instantiate", nil)
	select {
	case ev := <-events:
		if ev.event != "change" {
			t.Fatalf("event %+v", ev)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("the stream carried no change after the server's timeouts passed")
	}
	o.must(202, "POST", digPath+"/terminate", nil)
	o.waitContext(o.digState().ContextID, "terminated", allResources(appcontext.RsyncDeleted))
}
