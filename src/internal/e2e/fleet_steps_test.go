package e2e

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.mongodb.org/mongo-driver/bson"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	grpcstatus "google.golang.org/grpc/status"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	pb "github.com/argus-mc/argus/src/apis/fleet"
	"github.com/argus-mc/argus/src/internal/appcontext"
	"github.com/argus-mc/argus/src/internal/fleet/join"
	"github.com/argus-mc/argus/src/internal/simcluster"
	"github.com/argus-mc/argus/src/internal/testenv"
)

// agentCredential reads a pull cluster's agent credential from its Secret.
func agentCredential(t *testing.T, f *fleetTest, i int) string {
	t.Helper()
	sec, err := f.pulls.Clusters[i].Clientset().CoreV1().Secrets("argus-system").Get(context.Background(), "argus-agent", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return string(sec.Data["credential"])
}

// storesHold lists where etcd (under the test's prefix) and MongoDB (the
// test's database) hold secret.
func storesHold(t *testing.T, f *fleetTest, secret []byte) []string {
	t.Helper()
	ctx := context.Background()
	var where []string
	resp, err := stores.Etcd.Client.Get(ctx, f.prefix, clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range resp.Kvs {
		if bytes.Contains(kv.Value, secret) || bytes.Contains(kv.Key, secret) {
			where = append(where, "etcd "+string(kv.Key))
		}
	}
	db := stores.Mongo.Client.Database(f.db)
	names, err := db.ListCollectionNames(ctx, bson.M{})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		cur, err := db.Collection(n).Find(ctx, bson.M{})
		if err != nil {
			t.Fatal(err)
		}
		for cur.Next(ctx) {
			if bytes.Contains(cur.Current, secret) {
				where = append(where, "mongo "+n)
			}
		}
		_ = cur.Close(ctx)
	}
	return where
}

// credentials: the stores hold no credential of a pull cluster (its
// kubeconfig's token and key, its agent's credential, its join token),
// while they do hold the push cluster's kubeconfig; a used or expired
// join token is 401; one agent's credential for another cluster's work or
// status is 403 (PermissionDenied); a refused join ends the agent.
func (f *fleetTest) credentials(t *testing.T) {
	push := f.push.RESTConfig()
	if len(storesHold(t, f, []byte(push.BearerToken))) == 0 {
		t.Fatal("the scan finds nothing of the push cluster's kubeconfig: it looks in the wrong place")
	}
	secrets := map[string][]byte{}
	for i, c := range f.pulls.Clusters {
		cfg := c.RESTConfig()
		secrets[fmt.Sprintf("pull%02d kubeconfig token", i+1)] = []byte(cfg.BearerToken)
		if len(cfg.KeyData) > 0 {
			secrets[fmt.Sprintf("pull%02d client key", i+1)] = cfg.KeyData
		}
		secrets[fmt.Sprintf("pull%02d agent credential", i+1)] = []byte(agentCredential(t, f, i))
	}
	for name, tok := range f.tokens {
		_, secret, _ := strings.Cut(tok, ".")
		secrets[name+" join token"] = []byte(secret)
	}
	for what, secret := range secrets {
		if len(secret) < 16 {
			t.Fatalf("%s is too short to scan for", what)
		}
		if where := storesHold(t, f, secret); len(where) > 0 {
			t.Errorf("the stores hold the %s: %v", what, where)
		}
	}

	// A used token, then an expired one: 401.
	for name, tok := range f.tokens {
		if code, body := f.o.call("POST", "/v2/fleet/join", map[string]string{"token": tok}); code != 401 {
			t.Errorf("reused join token of %s: %d %s, want 401", name, code, body)
		}
	}
	js, err := join.New(join.Options{Client: stores.Etcd.Client, Prefix: f.prefix, TokenTTL: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	expiring, err := js.Register(context.Background(), appcontext.ClusterRef{Provider: "fleet-cp", Name: "expiring"})
	if err != nil {
		t.Fatal(err)
	}
	for time.Now().Before(expiring.Expires.Add(100 * time.Millisecond)) {
		time.Sleep(50 * time.Millisecond) // the token's lifetime is what is tested
	}
	if code, body := f.o.call("POST", "/v2/fleet/join", map[string]string{"token": expiring.Token}); code != 401 {
		t.Errorf("expired join token: %d %s, want 401", code, body)
	}

	// pull01's credential naming pull02: refused before anything is sent.
	cred := agentCredential(t, f, 0)
	if code := fleetHello(t, f.o, cred, "pull02"); code != codes.PermissionDenied {
		t.Errorf("pull01's credential for pull02's stream: %v, want PermissionDenied", code)
	}
	if code := fleetHello(t, f.o, "not-a-credential", "pull01"); code != codes.Unauthenticated {
		t.Errorf("a made-up credential: %v, want Unauthenticated", code)
	}
	// pull01's credential asking for a manifest of no work of its own.
	if code := fleetBlob(t, f.o, cred, "pull01", strings.Repeat("ab", 32)); code != codes.PermissionDenied {
		t.Errorf("pull01 asking for a manifest not in its work: %v, want PermissionDenied", code)
	}

	// An agent whose join is refused exits non-zero with the reason.
	a := startAgent(t, f.bin, f.o.base, "abcdef012345.not-the-secret", f.pulls.Clusters[0], "--agent-secret", "argus-agent-refused")
	if code := a.wait(); code == 0 || !strings.Contains(a.output(), "join token is unknown, expired or already used") {
		t.Errorf("refused join: exit %d, output:\n%s", code, tail(a.output(), 2000))
	}
}

// fleetStream opens a fleet stream with cred and sends a Hello for cluster.
func fleetStream(t *testing.T, o *orch, cred, cluster string) (pb.Fleet_ConnectClient, func()) {
	t.Helper()
	cc, err := grpc.NewClient("passthrough:///"+strings.TrimPrefix(o.base, "http://"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+cred), 30*time.Second)
	stream, err := pb.NewFleetClient(cc).Connect(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// io.EOF: the hub ended the stream first (a refused credential); the
	// caller's Recv returns the status it ended with.
	if err := stream.Send(&pb.AgentMessage{Body: &pb.AgentMessage_Hello{Hello: &pb.Hello{ClusterProvider: "fleet-cp", Cluster: cluster}}}); err != nil && !errors.Is(err, io.EOF) {
		t.Fatal(err)
	}
	return stream, func() { cancel(); _ = cc.Close() }
}

// fleetHello returns the code a stream ends with right after its Hello.
func fleetHello(t *testing.T, o *orch, cred, cluster string) codes.Code {
	stream, done := fleetStream(t, o, cred, cluster)
	defer done()
	for {
		if _, err := stream.Recv(); err != nil {
			return grpcstatus.Code(err)
		}
	}
}

// fleetBlob asks for a manifest on a stream and returns the code the
// stream ends with.
func fleetBlob(t *testing.T, o *orch, cred, cluster, sum string) codes.Code {
	stream, done := fleetStream(t, o, cred, cluster)
	defer done()
	if _, err := stream.Recv(); err != nil { // the Welcome
		return grpcstatus.Code(err)
	}
	ctxID := ""
	_ = stream.Send(&pb.AgentMessage{Body: &pb.AgentMessage_BlobRequest{BlobRequest: &pb.BlobRequest{ContextId: ctxID, Sha256: []string{sum}}}})
	for {
		if _, err := stream.Recv(); err != nil {
			return grpcstatus.Code(err)
		}
	}
}

// gitOps: EMCO's GitOps clusters are refused with a 400 naming pull mode.
func (f *fleetTest) gitOps(t *testing.T) {
	gitops := map[string]any{"gitOpsType": "fluxcd", "gitOpsReferenceObject": "repo", "gitOpsResourceObject": "repo"}
	code, body := f.o.call("POST", fleetCP+"/clusters", map[string]any{"metadata": map[string]any{"name": "git01"}, "spec": map[string]any{"gitOps": gitops}})
	if code != 400 || !strings.Contains(body, `"mode":"pull"`) {
		t.Errorf("gitOps cluster (JSON): %d %s, want 400 naming pull mode", code, body)
	}
	code, body = f.o.upload(fleetCP+"/clusters", map[string]any{"metadata": map[string]any{"name": "git02"}, "spec": map[string]any{"gitOps": gitops}}, f.push.Kubeconfig)
	if code != 400 || !strings.Contains(body, `"mode":"pull"`) {
		t.Errorf("gitOps cluster (multipart): %d %s, want 400 naming pull mode", code, body)
	}
	if code, _ := f.o.call("GET", fleetCP+"/clusters/git01", nil); code != 404 {
		t.Errorf("a refused gitOps cluster exists: %d", code)
	}
}

// cutOff: pull02's agent loses its link (the proxy it dials through
// closes every connection and refuses new ones) for ARGUS_FLEET_CUTOFF
// (5s; the scenario is 60s): the cluster shows Unreachable and its
// resources Unknown; a DIG update made meanwhile reaches it once the link
// is back; a subscription's callbacks go on without a sequence gap.
func (f *fleetTest) cutOff(t *testing.T) {
	cut := 5 * time.Second
	if v := os.Getenv("ARGUS_FLEET_CUTOFF"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatal(err)
		}
		cut = d
	}
	hk := newHook(t, "ok")
	f.o.must(201, "POST", fleetDIG+"/status/subscriptions", map[string]any{"name": "fleet", "callback-url": hk.url(), "type": "cluster"})
	cutAt := time.Now()
	f.proxy.Cut()
	unreachable := waitCond(t, time.Minute, "pull02 Unreachable with its resources Unknown", func() (bool, string) {
		view := clusterView(f.o.digStatus(fleetDIG, "type=cluster"), "pull02")
		for app, c := range view {
			if c.Connectivity != "Unreachable" {
				return false, app + ": " + c.Connectivity
			}
			for _, r := range c.Resources {
				if r.ReadyStatus != "Unknown" {
					return false, fmt.Sprintf("%s %s/%s %s", app, r.GVK.Kind, r.Name, r.ReadyStatus)
				}
			}
		}
		return len(view) == len(vfwApps), fmt.Sprintf("%d apps", len(view))
	})
	t.Logf("link cut: pull02 Unreachable and Unknown after %s (--fleet-unreachable-after 2s)", unreachable.Round(10*time.Millisecond))

	// The update: sink's ConfigMap changes.
	f.o.must(200, "PUT", fleetDIG, obj("vfw-dig", map[string]any{"compositeProfile": "vfw-profile", "version": "r1",
		"overrideValues": []any{map[string]any{"app": "sink", "values": map[string]any{"version": "two"}}}}))
	f.o.must(202, "POST", fleetDIG+"/update", nil)
	for name, cs := range map[string]kubernetes.Interface{"push01": f.push.Clientset(), "pull01": f.pulls.Clusters[0].Clientset()} {
		waitCond(t, time.Minute, name+" updated while pull02 is cut off", func() (bool, string) {
			v := configVersion(t, cs, "sink-fl-config")
			return v == "two", v
		})
	}
	if v := configVersion(t, f.pulls.Clusters[1].Clientset(), "sink-fl-config"); v != "one" {
		t.Fatalf("pull02 changed while cut off: %q", v)
	}
	select {
	case <-time.After(time.Until(cutAt.Add(cut))): // the scenario's length, not a synchronisation
	case <-t.Context().Done():
	}
	logBefore := len(f.agents["pull02"].output())
	f.proxy.Heal()
	restored := time.Now()
	applied := waitCond(t, time.Minute, "the update applied on pull02 after the link came back", func() (bool, string) {
		v := configVersion(t, f.pulls.Clusters[1].Clientset(), "sink-fl-config")
		return v == "two", v
	})
	t.Logf("link back after %s cut off: the update applied on pull02 %s later (target 10s)", time.Since(cutAt).Round(time.Second)-time.Since(restored).Round(time.Second), applied.Round(10*time.Millisecond))
	if applied > 50*time.Second {
		t.Errorf("the update took %s after the link came back; the target is 10s", applied)
	}
	waitCond(t, time.Minute, "pull02 Available and Ready again", func() (bool, string) {
		return allReady(f.o.digStatus(fleetDIG, "type=cluster"), "pull01", "pull02", "push01")
	})
	// Resumed, not resent: the reconnect named its last revision and got
	// only what changed (sink's item).
	after := f.agents["pull02"].output()[logBefore:]
	if n := strings.Count(after, "work received"); n != 1 || !strings.Contains(after, "app=sink") {
		t.Errorf("after the reconnect the agent took in %d work items, want sink's only:\n%s", n, tail(after, 3000))
	}
	if strings.Contains(after, "work_revision=0") {
		t.Errorf("the agent reconnected from revision 0 (a full resend)")
	}
	// The subscription: contiguous sequence numbers, one payload per number.
	hk.waitPost(0, "a notification after the reconnect", func(p post) bool { return p.at.After(restored) })
	got := seqs(hk)
	if !contiguous(got) {
		t.Fatalf("callback sequences %v have a gap", got)
	}
	t.Logf("subscription: %d callbacks, sequences %v without a gap", len(got), got)
}

// configVersion is a ConfigMap's data.version in namespace default.
func configVersion(t *testing.T, cs kubernetes.Interface, name string) string {
	t.Helper()
	cm, err := cs.CoreV1().ConfigMaps("default").Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		return err.Error()
	}
	return cm.Data["version"]
}

// replicas: with scripts/ha-up.sh and three replicas, the agent (given all
// three URLs) connects to one; that replica is killed (-9); the agent
// connects to another, and a status change on its cluster reaches the
// status answers again within the lease TTL plus 5 s.
func (f *fleetTest) replicas(t *testing.T) {
	const ttl = 10 * time.Second
	// ha01's agent runs on pull01's cluster: pull01's agent (its work
	// terminated) goes first, so one agent and one monitor own the
	// cluster's ResourceBundleStates, as in a real fleet.
	f.agents["pull01"].stop()
	h := startHA(t, 3, "--fleet-unreachable-after=2s", "--lease-ttl="+ttl.String())
	r1 := h.replicas[0].orch
	r1.must(201, "POST", "/v2/cluster-providers", meta("fleet-cp"))
	token := r1.registerPull("fleet-cp", "ha01")
	var urls []string
	for _, r := range h.replicas {
		urls = append(urls, r.base)
	}
	a := startAgent(t, f.bin, strings.Join(urls, ","), token, f.pulls.Clusters[0], "--agent-secret", "argus-agent-ha")
	defer func() {
		if t.Failed() {
			t.Logf("agent:\n%s", tail(a.output(), 5000))
		}
	}()
	const dig = fleetProject + "/composite-apps/ha/v1/deployment-intent-groups/ha-dig"
	onboardComposite(t, r1, "fleet", "ha", "ha-dig", []string{"sink"}, func(a string) []byte { return fleetChart(t, a, "ha") },
		map[string]any{"clusterProvider": "fleet-cp", "cluster": "ha01"})
	r1.must(202, "POST", dig+"/approve", nil)
	r1.must(202, "POST", dig+"/instantiate", nil)
	podReady := func(r *orch) (string, string) {
		for _, app := range r.digStatus(dig, "type=cluster").Apps {
			for _, c := range app.Clusters {
				for _, res := range c.Resources {
					if res.GVK.Kind == "Pod" {
						return res.ReadyStatus, c.Connectivity
					}
				}
			}
		}
		return "", ""
	}
	ready := waitCond(t, 2*time.Minute, "the DIG Ready on the pull cluster", func() (bool, string) {
		st, conn := podReady(r1)
		return st == "Ready" && conn == "Available", st + " " + conn
	})
	t.Logf("instantiate → Ready on ha01 through the replicas: %s", ready.Round(10*time.Millisecond))
	// The replica the agent streams to.
	var holder *haReplica
	waitCond(t, time.Minute, "one replica serves the agent", func() (bool, string) {
		holder = nil
		for _, r := range h.replicas {
			if metricValue(t, r.orch, "argus_fleet_agents_connected") == 1 {
				holder = r
			}
		}
		return holder != nil, "no replica reports the agent"
	})
	var other *haReplica
	for _, r := range h.replicas {
		if r != holder {
			other = r
			break
		}
	}
	if err := syscall.Kill(holder.pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if _, err := simcluster.SetPodState(t.Context(), f.pulls.Clusters[0].Clientset(), "default", "app=sink-ha", "not-ready"); err != nil {
		t.Fatal(err)
	}
	flowed := waitCond(t, 5*(ttl+5*time.Second), "the status change through another replica", func() (bool, string) {
		st, conn := podReady(other.orch)
		return st != "Ready" && st != "Unknown" && st != "" && conn == "Available", st + " " + conn
	})
	reconnected := "?"
	for _, r := range h.replicas {
		if r != holder && metricValue(t, r.orch, "argus_fleet_agents_connected") == 1 {
			reconnected = r.id
		}
	}
	t.Logf("kill -9 of %s, the replica the agent streamed to: the agent is on %s, and the pod's change reached the status %s after the kill (lease TTL %s + 5s = %s)",
		holder.id, reconnected, flowed.Round(10*time.Millisecond), ttl, ttl+5*time.Second)
}

// metricValue reads one gauge or counter from a replica's /metrics.
func metricValue(t *testing.T, o *orch, name string) float64 {
	t.Helper()
	code, body := o.call("GET", "/metrics", nil)
	if code != 200 {
		return -1
	}
	if v, ok := testenv.Metric(body, name); ok {
		return v
	}
	return -1
}

// terminate: the DIG's objects leave the pull clusters through their
// agents, and deleting a pull cluster revokes its agent's credential: the
// agent ends, non-zero, saying so.
func (f *fleetTest) terminate(t *testing.T) {
	f.o.must(202, "POST", fleetDIG+"/terminate", nil)
	waitCond(t, time.Minute, "the DIG Terminated, its objects gone from the pull clusters", func() (bool, string) {
		if st := f.o.digStatus(fleetDIG, "type=rsync"); st.Status != "Terminated" {
			return false, st.Status
		}
		for i, c := range f.pulls.Clusters {
			if _, err := c.Clientset().AppsV1().Deployments("default").Get(t.Context(), "sink-fl", metav1.GetOptions{}); err == nil {
				return false, fmt.Sprintf("sink-fl still on pull%02d", i+1)
			}
		}
		return true, ""
	})
	f.o.must(204, "DELETE", fleetCP+"/clusters/pull02/labels/fleet", nil)
	f.o.must(204, "DELETE", fleetCP+"/clusters/pull02", nil)
	a := f.agents["pull02"]
	if code := a.wait(); code == 0 || !strings.Contains(a.output(), "refused") {
		t.Errorf("the deleted cluster's agent: exit %d:\n%s", code, tail(a.output(), 2000))
	}
	// Its recorded state (connectivity, last seen) goes with it.
	key := f.o.contexts.ClusterStateKey(appcontext.ClusterRef{Provider: "fleet-cp", Name: "pull02"})
	waitCond(t, 30*time.Second, "the deleted cluster's state gone from etcd", func() (bool, string) {
		resp, err := stores.Etcd.Client.Get(t.Context(), key)
		if err != nil {
			return false, err.Error()
		}
		if len(resp.Kvs) > 0 {
			return false, string(resp.Kvs[0].Value)
		}
		return true, ""
	})
}
