package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"reflect"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/argus-mc/argus/src/internal/cli"
	"github.com/argus-mc/argus/src/internal/simcluster"
	"github.com/argus-mc/argus/src/internal/status"
)

// argusRun runs the argus command in-process against o (ARGUS_SERVER, as a
// pipeline sets it) and returns its exit code and output.
func argusRun(ctx context.Context, o *orch, args ...string) (int, string, string) {
	var out, errOut strings.Builder
	code := cli.Run(ctx, cli.Options{Args: args, Stdout: &out, Stderr: &errOut,
		Getenv: func(k string) string {
			if k == "ARGUS_SERVER" {
				return o.base
			}
			return ""
		}})
	return code, out.String(), errOut.String()
}

const digRef = "p1/ca/v1/dig1"

// TestArgusCommand is issue 29's acceptance for the argus command, against
// a real orchestrator and simulated clusters: wait exits 0 on the ready
// DIG; status -o json is the API's answer and the tree lists pods under
// their Deployment; watch prints a pod's crash loop as it happens; wait
// then exits 1 when its timeout passes, naming the failed pod.
func TestArgusCommand(t *testing.T) {
	sharedClusters(t)
	o := readyDIG(t, "argus")
	ctx := context.Background()

	start := time.Now()
	if code, out, errOut := argusRun(ctx, o, "wait", digRef, "--for", "ready", "--timeout", "60s"); code != cli.ExitOK || !strings.Contains(out, "is ready") {
		t.Fatalf("wait on the ready DIG: exit %d, %q %q", code, out, errOut)
	}
	t.Logf("argus wait --for ready on the ready DIG: exit 0 after %s", time.Since(start).Round(time.Millisecond))

	checkStatusJSON(t, o)
	code, tree, errOut := argusRun(ctx, o, "status", digRef)
	if code != cli.ExitOK || !podUnderDeployment(tree, "frontend") || !strings.Contains(tree, "cache-config") {
		t.Fatalf("status tree: exit %d %s\n%s", code, errOut, tree)
	}
	for _, args := range [][]string{{"history", digRef}, {"clusters"}, {"list"}, {"status", digRef, "-o", "wide"}, {"status", digRef, "-o", "yaml"}} {
		if code, out, errOut := argusRun(ctx, o, args...); code != cli.ExitOK || out == "" {
			t.Fatalf("argus %v: exit %d %s", args, code, errOut)
		}
	}

	// watch prints a pod's crash loop as it happens.
	lines, stop := argusWatch(t, o)
	defer stop()
	cs := sim.Cluster("cluster2").Clientset()
	changed := time.Now()
	pod, err := simcluster.SetPodState(ctx, cs, "default", "app=frontend", "crashloop")
	if err != nil {
		t.Fatal(err)
	}
	var podAt, depAt time.Time
	deadline := time.After(60 * time.Second)
	for podAt.IsZero() || depAt.IsZero() {
		select {
		case l := <-lines:
			switch {
			case strings.Contains(l.text, "Pod default/"+pod) && strings.Contains(l.text, "Failed"):
				podAt = l.at
			case strings.Contains(l.text, "Deployment default/frontend") && strings.Contains(l.text, "Failed") && strings.Contains(l.text, pod):
				depAt = l.at // Failed with the pod's reason, not Pending
			}
		case <-deadline:
			t.Fatalf("after 60s: pod line at %v, Deployment line at %v", podAt, depAt)
		}
	}
	t.Logf("pod %s set to crash-loop → argus watch printed it %s later (acceptance: within 1 s)", pod, podAt.Sub(changed).Round(time.Millisecond))

	// wait now runs into its timeout and says why.
	start = time.Now()
	code, out, errOut := argusRun(ctx, o, "wait", digRef, "--for", "ready", "--timeout", "8s")
	took := time.Since(start)
	if code != cli.ExitNotReached || !strings.Contains(errOut, "timed out after 8s") || !strings.Contains(errOut, "Failed Pod/"+pod) {
		t.Fatalf("wait on the crash-looping DIG: exit %d after %s, %q %q", code, took, out, errOut)
	}
	if took > 40*time.Second {
		t.Fatalf("wait --timeout 8s took %s", took)
	}
	t.Logf("argus wait --timeout 8s after the crash loop: exit %d after %s: %s", code, took.Round(time.Millisecond), strings.TrimSpace(errOut))
	if _, err := simcluster.SetPodState(ctx, cs, "default", "app=frontend", "ready"); err != nil {
		t.Fatal(err)
	}
	checkSync(t, o)
}

// checkSync: a ConfigMap deleted by hand is Missing; wait --for synced
// times out naming it, sync re-applies it, and wait --for synced then
// exits 0.
func checkSync(t *testing.T, o *orch) {
	t.Helper()
	ctx := context.Background()
	if err := sim.Cluster("cluster1").Clientset().CoreV1().ConfigMaps("default").Delete(ctx, "backend-config", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	o.waitStatus("type=cluster", "backend-config Missing", func(r status.Response) (bool, string) {
		return r.SyncCounts["Missing"] == 1, fmt.Sprint(r.SyncCounts)
	})
	code, _, errOut := argusRun(ctx, o, "wait", digRef, "--for", "synced", "--timeout", "2s")
	if code != cli.ExitNotReached || !strings.Contains(errOut, "Missing ConfigMap/backend-config") {
		t.Fatalf("wait --for synced with a Missing ConfigMap: exit %d %q", code, errOut)
	}
	code, out, errOut := argusRun(ctx, o, "sync", digRef)
	if code != cli.ExitOK || !strings.Contains(out, "ConfigMap/backend-config") || !strings.Contains(out, "Missing") {
		t.Fatalf("sync: exit %d %q %q", code, out, errOut)
	}
	start := time.Now()
	if code, out, errOut := argusRun(ctx, o, "wait", digRef, "--for", "synced", "--timeout", "60s"); code != cli.ExitOK {
		t.Fatalf("wait --for synced after the sync: exit %d %q %q", code, out, errOut)
	}
	t.Logf("argus sync re-applied the deleted ConfigMap; wait --for synced exited 0 after %s", time.Since(start).Round(time.Millisecond))
}

// checkStatusJSON: argus status -o json prints the API's answer to
// GET …/status?type=cluster&output=all. The answer may move between two
// reads (a monitor's last-seen time), so it must equal a read made just
// before or just after it; a few tries ride out a change in between.
func checkStatusJSON(t *testing.T, o *orch) {
	t.Helper()
	for try := 0; try < 5; try++ {
		before := o.must(200, "GET", digPath+"/status?type=cluster&output=all", nil)
		code, out, errOut := argusRun(context.Background(), o, "status", digRef, "-o", "json")
		after := o.must(200, "GET", digPath+"/status?type=cluster&output=all", nil)
		if code != cli.ExitOK {
			t.Fatalf("status -o json: exit %d %s", code, errOut)
		}
		if jsonEqual(t, out, before) || jsonEqual(t, out, after) {
			return
		}
	}
	t.Fatal("argus status -o json never equalled the API's answer")
}

// podUnderDeployment reports a tree with app's pods below its ReplicaSet
// below its Deployment.
func podUnderDeployment(tree, app string) bool {
	dep, rs := -1, -1
	for _, l := range strings.Split(tree, "\n") {
		indent := strings.Index(l, strings.TrimLeft(l, " │├└─"))
		switch {
		case strings.Contains(l, "Deployment/"+app+" "):
			dep = indent
		case dep >= 0 && strings.Contains(l, "ReplicaSet/"+app+"-"):
			rs = indent
		case rs > dep && dep >= 0 && strings.Contains(l, "Pod/"+app+"-") && indent > rs:
			return true
		}
	}
	return false
}

// argusWatch runs argus watch on the DIG and hands over its lines, each
// with the time it was printed; stop ends it and waits for it.
func argusWatch(t *testing.T, o *orch) (<-chan timedLine, func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	done := make(chan struct{})
	go func() {
		defer close(done)
		cli.Run(ctx, cli.Options{Args: []string{"watch", digRef}, Stdout: pw, Stderr: pw,
			Getenv: func(k string) string {
				if k == "ARGUS_SERVER" {
					return o.base
				}
				return ""
			}})
		_ = pw.Close()
	}()
	lines := make(chan timedLine, 1000)
	read := make(chan struct{})
	go func() {
		defer close(read)
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			select {
			case lines <- timedLine{sc.Text(), time.Now()}:
			default:
			}
		}
	}()
	// The first line is the snapshot: the stream is open.
	if l := waitLine(t, lines, 30*time.Second, func(l string) bool { return strings.Contains(l, "ready") }); l.IsZero() {
		t.Fatal("argus watch printed no snapshot")
	}
	return lines, func() {
		cancel()
		<-done
		<-read
	}
}

type timedLine struct {
	text string
	at   time.Time
}

// waitLine waits (deadline d) for a line that passes ok and returns when it
// was printed.
func waitLine(t *testing.T, lines <-chan timedLine, d time.Duration, ok func(string) bool) time.Time {
	t.Helper()
	deadline := time.After(d)
	for {
		select {
		case l := <-lines:
			if ok(l.text) {
				return l.at
			}
		case <-deadline:
			t.Fatalf("no such line after %s", d)
			return time.Time{}
		}
	}
}

// checkArgusInstance: the contract for a v1 instance, named by --instance
// ID: wait --for ready exits 0 once it is ready (monitors started here
// report its readiness), plain status prints the tree with its pod, and
// status -o json is GET /v1/instance/ID/status.
func checkArgusInstance(t *testing.T, o *orch, id, pod string) {
	t.Helper()
	ctx := context.Background()
	mons := startMonitors(t, sim)
	defer func() {
		for _, c := range sim.Clusters {
			mons.stop(c.Name)
		}
	}()
	if code, out, errOut := argusRun(ctx, o, "wait", "--instance", id, "--for", "ready", "--timeout", "60s"); code != cli.ExitOK {
		t.Fatalf("argus wait --instance %s: exit %d %q %q", id, code, out, errOut)
	}
	if code, tree, errOut := argusRun(ctx, o, "status", "--instance", id); code != cli.ExitOK || !strings.Contains(tree, "Pod/"+pod) {
		t.Fatalf("argus status --instance %s: exit %d %s\n%s", id, code, errOut, tree)
	}
	for try := 0; ; try++ {
		before := o.must(200, "GET", "/v1/instance/"+id+"/status", nil)
		code, out, errOut := argusRun(ctx, o, "status", "--instance", id, "-o", "json")
		after := o.must(200, "GET", "/v1/instance/"+id+"/status", nil)
		if code != cli.ExitOK {
			t.Fatalf("argus status --instance %s -o json: exit %d %s", id, code, errOut)
		}
		if jsonEqual(t, out, before) || jsonEqual(t, out, after) {
			return
		}
		if try == 4 {
			t.Fatalf("argus status --instance %s -o json never equalled the API's answer:\n%s\n%s", id, out, after)
		}
	}
}

// jsonEqual reports whether two JSON documents hold the same value.
func jsonEqual(t *testing.T, a, b string) bool {
	t.Helper()
	var va, vb any
	if err := json.Unmarshal([]byte(a), &va); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, a)
	}
	if err := json.Unmarshal([]byte(b), &vb); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, b)
	}
	return reflect.DeepEqual(va, vb)
}
