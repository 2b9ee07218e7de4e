package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/argus-mc/argus/src/internal/orchestrator"
	"github.com/argus-mc/argus/src/internal/simcluster"
	"github.com/argus-mc/argus/src/internal/status"
	"github.com/argus-mc/argus/src/internal/testenv"
	"github.com/argus-mc/argus/src/internal/testenv/tgz"
)

// Issue 25, fleet mode: clusters the orchestrator cannot dial join by
// token, pull their work and push their state. Two pull clusters of the
// test's own (their agents are bin/monitor processes; their kubeconfigs
// never reach the orchestrator) and the package's first cluster as a push
// cluster registered as always.

const (
	fleetProject = "/v2/projects/fleet"
	fleetCA      = fleetProject + "/composite-apps/vfw/v1"
	fleetDIG     = fleetCA + "/deployment-intent-groups/vfw-dig"
	fleetCP      = "/v2/cluster-providers/fleet-cp"
)

// fleetChart is the vfw chart with objects named <release>-<suffix>, so
// the package's other vfw tests on the shared push cluster (and this
// test's other orchestrators) never meet them; values.version changes the
// ConfigMap.
func fleetChart(t *testing.T, name, suffix string) []byte {
	return tgz.FromInside(t, map[string]string{
		"Chart.yaml":  "apiVersion: v2\nname: " + name + "\nversion: 0.1.0\n",
		"values.yaml": "version: one\nsuffix: " + suffix + "\n",
		"templates/all.yaml": `apiVersion: apps/v1
kind: Deployment
metadata:
  name: {{ .Release.Name }}-{{ .Values.suffix }}
spec:
  replicas: 1
  selector:
    matchLabels: {app: {{ .Release.Name }}-{{ .Values.suffix }}}
  template:
    metadata:
      labels: {app: {{ .Release.Name }}-{{ .Values.suffix }}}
    spec:
      containers:
      - {name: main, image: "busybox:1.36"}
---
apiVersion: v1
kind: Service
metadata:
  name: {{ .Release.Name }}-{{ .Values.suffix }}
spec:
  selector: {app: {{ .Release.Name }}-{{ .Values.suffix }}}
  ports:
  - port: 80
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: {{ .Release.Name }}-{{ .Values.suffix }}-config
data:
  version: {{ .Values.version | quote }}
`,
	})
}

// buildMonitor builds the monitor binary (agent mode is a flag of it).
// It returns at once; the returned function waits for the build (the
// pull clusters start meanwhile) and returns the binary's path.
func buildMonitor(t testing.TB) func() string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "monitor")
	var out strings.Builder
	cmd := exec.Command("go", "build", "-o", bin, "../../cmd/monitor")
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() { // a test that failed before waiting still reaps the build
		select {
		case <-done:
		case <-time.After(2 * time.Minute):
			_ = cmd.Process.Kill()
			<-done
		}
	})
	return func() string {
		t.Helper()
		select {
		case err := <-done:
			done <- err // for the cleanup
			if err != nil {
				t.Fatalf("go build monitor: %v: %s", err, out.String())
			}
		case <-time.After(2 * time.Minute):
			t.Fatalf("go build monitor: not done after 2m")
		}
		return bin
	}
}

// preparePull installs what the agent's manifests bring (the CRD and the
// argus-system namespace) on a pull cluster.
func preparePull(t testing.TB, set *simcluster.Set) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := installCRD(ctx, set); err != nil {
		t.Fatal(err)
	}
	for _, c := range set.Clusters {
		if _, err := testenv.ApplyManifestFiles(ctx, c.RESTConfig(), false, "../../../deployments/kubernetes/monitor/namespace.yaml"); err != nil {
			t.Fatal(err)
		}
	}
}

// agentProc is an agent (bin/monitor in agent mode) run by a test.
type agentProc struct {
	t    testing.TB
	proc *testenv.Proc
	mu   sync.Mutex
	out  strings.Builder
}

// startAgent runs the agent of cluster c against the orchestrator URLs.
func startAgent(t testing.TB, bin, urls, token string, c *simcluster.Cluster, extra ...string) *agentProc {
	t.Helper()
	args := append([]string{"--orchestrator", urls, "--kubeconfig", c.KubeconfigPath, "--listen", "127.0.0.1:0",
		"--log-format", "text", "--log-level", "debug", "--lease-renew-interval", "2s"}, extra...)
	if token != "" {
		args = append(args, "--join-token", token)
	}
	a := &agentProc{t: t}
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), "KUBECONFIG=")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout // one pipe, read to its end before the wait
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	a.proc, err = testenv.StartProc(cmd, func() {
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			a.mu.Lock()
			a.out.WriteString(sc.Text() + "\n")
			a.mu.Unlock()
		}
		_, _ = io.Copy(io.Discard, out) // a line over 1 MiB ends the scan, not the reading
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.stop)
	return a
}

func (a *agentProc) output() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.out.String()
}

// stop ends the agent with SIGTERM (SIGKILL after 30 s) and waits.
func (a *agentProc) stop() {
	if a.proc.Stop(30 * time.Second) {
		a.t.Errorf("agent ignored SIGTERM for 30s:\n%s", tail(a.output(), 3000))
	}
}

// wait returns the agent's exit code once it exits (60 s at most).
func (a *agentProc) wait() int {
	select {
	case <-a.proc.Done():
		return a.proc.Cmd.ProcessState.ExitCode()
	case <-time.After(60 * time.Second):
		a.t.Fatalf("agent still running after 60s:\n%s", tail(a.output(), 3000))
		return 0
	}
}

func tail(s string, n int) string { return s[max(0, len(s)-n):] }

// registerPull creates a cluster in pull mode and returns its join token.
func (o *orch) registerPull(provider, name string) string {
	o.t.Helper()
	body := o.must(201, "POST", "/v2/cluster-providers/"+provider+"/clusters",
		map[string]any{"metadata": map[string]any{"name": name}, "spec": map[string]any{"mode": "pull"}})
	var answer struct {
		JoinToken string `json:"joinToken"`
		Spec      struct {
			Mode string `json:"mode"`
		} `json:"spec"`
	}
	if err := json.Unmarshal([]byte(body), &answer); err != nil || answer.JoinToken == "" || answer.Spec.Mode != "pull" {
		o.t.Fatalf("pull cluster %s: %s (%v)", name, body, err)
	}
	return answer.JoinToken
}

// waitCond polls cond (deadline d) and returns how long it took.
func waitCond(t testing.TB, d time.Duration, what string, cond func() (bool, string)) time.Duration {
	t.Helper()
	start := time.Now()
	last := ""
	for time.Since(start) < d {
		ok, state := cond()
		if ok {
			return time.Since(start)
		}
		last = state
		time.Sleep(50 * time.Millisecond) // polling with a deadline
	}
	t.Fatalf("%s: not true after %s; last: %s", what, d, last)
	return 0
}

// clusterView is one cluster's part of a type=cluster answer, per app.
func clusterView(r status.Response, cluster string) map[string]status.Cluster {
	out := map[string]status.Cluster{}
	for _, a := range r.Apps {
		for _, c := range a.Clusters {
			if c.Cluster == cluster {
				out[a.Name] = c
			}
		}
	}
	return out
}

// allReady says whether every app is Ready on every named cluster, each
// with its three objects and a Pod.
func allReady(r status.Response, clusters ...string) (bool, string) {
	for _, cl := range clusters {
		view := clusterView(r, cl)
		if len(view) != len(vfwApps) {
			return false, fmt.Sprintf("%s: %d apps", cl, len(view))
		}
		for app, c := range view {
			if c.Connectivity != "Available" || c.Monitor != "Running" || c.Ready == nil || !*c.Ready {
				return false, fmt.Sprintf("%s/%s: connectivity %s monitor %s ready %v", cl, app, c.Connectivity, c.Monitor, c.Ready != nil && *c.Ready)
			}
			kinds := map[string]int{}
			for _, res := range c.Resources {
				kinds[res.GVK.Kind]++
			}
			if kinds["Deployment"] != 1 || kinds["Service"] != 1 || kinds["ConfigMap"] != 1 || kinds["Pod"] != 1 {
				return false, fmt.Sprintf("%s/%s: kinds %v", cl, app, kinds)
			}
		}
	}
	return true, ""
}

// shape is what a cluster's entry looks like, names of Pods left out.
func shape(c status.Cluster) string {
	var res []string
	for _, r := range c.Resources {
		name := r.Name
		if r.GVK.Kind == "Pod" {
			name = "*"
		}
		res = append(res, fmt.Sprintf("%s/%s/%s %s %s %s sync=%s", r.GVK.Group, r.GVK.Kind, name, r.ClusterStatus, r.ReadyStatus, r.Namespace, r.SyncStatus))
	}
	sort.Strings(res)
	return fmt.Sprintf("ready=%v %s monitor=%s last-seen-set=%v [%s]", c.Ready != nil && *c.Ready, c.Connectivity, c.Monitor, c.LastSeen != "", strings.Join(res, "; "))
}

func TestFleet(t *testing.T) {
	ownClusters(t)
	began := time.Now()
	built := buildMonitor(t)
	// push01 is a cluster of the test's own too (not the package's), so
	// the test runs beside those using the package's clusters.
	all := testenv.Clusters(t, 3)
	push, pulls := &simcluster.Set{Clusters: all.Clusters[:1]}, &simcluster.Set{Clusters: all.Clusters[1:]}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := installCRD(ctx, push); err != nil {
		t.Fatal(err)
	}
	preparePull(t, pulls)
	bin := built()
	t.Logf("the push and two pull clusters started and the monitor built: %s", time.Since(began).Round(10*time.Millisecond))
	startMonitors(t, push) // the push cluster's monitor
	db, prefix := stores.Database(t).Name(), stores.EtcdPrefix()
	o := startOrchestrator(t, db, prefix, func(opts *orchestrator.Options) {
		opts.CallbackAllow = []string{"127.0.0.1"} // the test's receiver
		opts.Fleet.UnreachableAfter = 2 * time.Second
		opts.Fleet.Heartbeat = 2 * time.Second
	})
	o.must(201, "POST", "/v2/cluster-providers", meta("fleet-cp"))
	o.uploadOK(fleetCP+"/clusters", meta("push01"), push.Clusters[0].Kubeconfig)
	tokens := map[string]string{"pull01": o.registerPull("fleet-cp", "pull01"), "pull02": o.registerPull("fleet-cp", "pull02")}
	for _, c := range []string{"push01", "pull01", "pull02"} {
		o.must(201, "POST", fleetCP+"/clusters/"+c+"/labels", map[string]string{"clusterLabel": "fleet"})
	}
	proxy := testenv.NewProxy(t, strings.TrimPrefix(o.base, "http://"))
	agents := map[string]*agentProc{
		"pull01": startAgent(t, bin, o.base, tokens["pull01"], pulls.Clusters[0]),
		"pull02": startAgent(t, bin, "http://"+proxy.Addr(), tokens["pull02"], pulls.Clusters[1]),
	}
	defer func() {
		if t.Failed() {
			for name, a := range agents {
				t.Logf("agent %s:\n%s", name, tail(a.output(), 6000))
			}
		}
	}()
	onboardComposite(t, o, "fleet", "vfw", "vfw-dig", vfwApps, func(a string) []byte { return fleetChart(t, a, "fl") },
		map[string]any{"clusterProvider": "fleet-cp", "clusterLabel": "fleet"})
	o.must(202, "POST", fleetDIG+"/approve", nil)
	start := time.Now()
	o.must(202, "POST", fleetDIG+"/instantiate", nil)
	waitCond(t, 3*time.Minute, "every app Ready on the push and both pull clusters", func() (bool, string) {
		return allReady(o.digStatus(fleetDIG, "type=cluster"), "push01", "pull01", "pull02")
	})
	t.Logf("instantiate → Applied and Ready on 1 push and 2 pull clusters: %s", time.Since(start).Round(10*time.Millisecond))
	r := o.digStatus(fleetDIG, "type=cluster")
	t.Logf("sink on pull01: %s", shape(clusterView(r, "pull01")["sink"]))
	for _, app := range vfwApps {
		want := shape(clusterView(r, "push01")[app])
		for _, cl := range []string{"pull01", "pull02"} {
			if got := shape(clusterView(r, cl)[app]); got != want {
				t.Errorf("%s on %s: %s\n  push01: %s", app, cl, got, want)
			}
		}
	}
	if os.Getenv("FLEET_DEBUG") != "" {
		data, _ := json.MarshalIndent(clusterView(r, "pull01")["sink"], "", " ")
		t.Logf("pull01 sink: %s\nagent: %s", data, tail(agents["pull01"].output(), 4000))
	}
	for i, c := range pulls.Clusters {
		for _, app := range vfwApps {
			d, err := c.Clientset().AppsV1().Deployments("default").Get(context.Background(), app+"-fl", metav1.GetOptions{})
			if err != nil || d.Labels["argus.io/app"] != app {
				t.Errorf("pull%02d: deployment %s-fl: %v %v", i+1, app, err, d.Labels)
			}
		}
	}
	rs := o.digStatus(fleetDIG, "type=rsync")
	if rs.RsyncStatus["Applied"] != 3*3*3 || len(rs.RsyncStatus) != 1 {
		t.Errorf("rsync status %v, want 27 Applied", rs.RsyncStatus)
	}
	f := &fleetTest{o: o, prefix: prefix, db: db, push: push.Clusters[0], pulls: pulls, bin: bin, tokens: tokens, agents: agents, proxy: proxy}
	t.Run("credentials", f.credentials)
	t.Run("gitOps", f.gitOps)
	t.Run("cut off", f.cutOff)
	t.Run("terminate and delete", f.terminate)
	t.Run("replicas", f.replicas)
}

// fleetTest is what TestFleet's steps share.
type fleetTest struct {
	o          *orch
	prefix, db string
	push       *simcluster.Cluster
	pulls      *simcluster.Set
	bin        string
	tokens     map[string]string
	agents     map[string]*agentProc
	proxy      *testenv.Proxy
}
