package e2e

// Issue 23 (low items): a cluster deleted while an instantiate placed on it
// renders, and a kill between a DIG's lifecycle write and its context.

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/argus-mc/argus/src/internal/appcontext"
	"github.com/argus-mc/argus/src/internal/catalog"
	"github.com/argus-mc/argus/src/internal/orchestrator"
	"github.com/argus-mc/argus/src/internal/render"
	"github.com/argus-mc/argus/src/internal/testenv"
)

// slowChart renders one ConfigMap after seconds of template work.
func slowChart(t *testing.T) []byte {
	return testenv.ArchiveFiles(t, map[string]string{
		"slow/Chart.yaml": "apiVersion: v2\nname: slow\nversion: 0.1.0\n",
		"slow/templates/cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ .Release.Name }}\ndata:\n  x: \"" +
			"{{- range $i := until 6000 }}{{- range $j := until 2000 }}{{- end }}{{- end }}done\"\n",
	})
}

// renderCPU is the CPU time (clock ticks) the render workers of this test
// binary used so far: it grows while a chart renders.
func renderCPU(t *testing.T) int64 {
	t.Helper()
	entries, _ := os.ReadDir("/proc")
	var total int64
	self := strconv.Itoa(os.Getpid())
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		cmd, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || !strings.Contains(string(cmd), "\x00"+render.WorkerArg) {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// Fields after the command's closing parenthesis: state ppid … utime stime (14th, 15th).
		f := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+2:]))
		if len(f) < 13 || f[1] != self {
			continue
		}
		u, _ := strconv.ParseInt(f[11], 10, 64)
		s, _ := strconv.ParseInt(f[12], 10, 64)
		total += u + s
	}
	return total
}

// A cluster deleted while an instantiate placed on it renders: the delete
// and the instantiate never both succeed. Either the delete finds the new
// context (409), or the instantiate, once its context exists, finds the
// cluster gone and gives up (409, the DIG Terminated, nothing applied).
func TestClusterDeletedWhileInstantiateRenders(t *testing.T) {
	alone(t) // renderCPU counts every render worker of this binary, and the slow chart must render within the limit
	// The chart renders for seconds (about 8 under -race on an idle CI
	// machine; a chart three times as long passed the default 20 s limit
	// on a busy one): what is tested is the delete landing mid-render, not
	// the limit.
	o := startOrchestrator(t, testenv.UniqueName("race"), "/"+testenv.UniqueName("race"),
		func(o *orchestrator.Options) { o.Render.Timeout = 2 * time.Minute })
	c := sim.Clusters[0]
	onboardOne(t, o, "slow", slowChart(t))

	type answer struct {
		code int
		body string
		took time.Duration
	}
	idle := renderCPU(t)
	inst := make(chan answer, 1)
	start := time.Now()
	go func() {
		code, body := o.call("POST", digPath+"/instantiate", nil)
		inst <- answer{code, body, time.Since(start)}
	}()
	// Once a render worker has burnt half a second of CPU, the chart is
	// rendering: the placement is resolved, no context exists yet.
	var early *answer
	for deadline := time.Now().Add(60 * time.Second); renderCPU(t) < idle+50; time.Sleep(20 * time.Millisecond) { // polling with a deadline
		select {
		case a := <-inst:
			early = &a
		default:
		}
		if early != nil || time.Now().After(deadline) {
			t.Fatalf("the chart never rendered for long: instantiate %+v", early)
		}
	}
	delCode, delBody := o.call("DELETE", "/v2/cluster-providers/cp/clusters/"+c.Name, nil)
	a := <-inst
	t.Logf("delete during render: %d %s; instantiate: %d after %s: %s", delCode, strings.TrimSpace(delBody), a.code,
		a.took.Round(time.Millisecond), strings.TrimSpace(a.body))
	switch {
	case delCode == 204 && a.code == 409 && strings.Contains(a.body, c.Name) && strings.Contains(a.body, "deleted"):
		st := o.digState()
		if st.Current != catalog.StateTerminated {
			t.Fatalf("after the instantiate gave up the DIG is %s, want Terminated", st.Current)
		}
		ctx, err := o.contexts.Get(t.Context(), st.ContextID)
		if err != nil || ctx.Status.Status != appcontext.Terminated {
			t.Fatalf("the abandoned context: %v %v", ctx, err)
		}
	case delCode == 409 && a.code == 202:
		t.Log("the instantiate's context was recorded before the delete looked: the delete was refused")
	default:
		t.Fatalf("delete %d and instantiate %d: a cluster was deleted under a deployed DIG, or neither went through", delCode, a.code)
	}
}

// onboardOne registers the first cluster and a DIG placing one app (its
// chart given) on it, approved.
func onboardOne(t *testing.T, o *orch, app string, chart []byte) {
	c := sim.Clusters[0]
	o.must(201, "POST", "/v2/cluster-providers", meta("cp"))
	o.uploadOK("/v2/cluster-providers/cp/clusters", meta(c.Name), c.Kubeconfig)
	o.must(201, "POST", "/v2/projects", meta("p1"))
	o.must(201, "POST", "/v2/projects/p1/composite-apps", obj("ca", map[string]any{"compositeAppVersion": "v1"}))
	o.must(201, "POST", caPath+"/composite-profiles", meta("cpf"))
	o.uploadOK(caPath+"/apps", meta(app), chart)
	o.must(201, "POST", caPath+"/deployment-intent-groups", obj("dig1", map[string]any{"compositeProfile": "cpf", "version": "r1"}))
	o.must(201, "POST", digPath+"/generic-placement-intents", meta("gpi"))
	o.must(201, "POST", digPath+"/generic-placement-intents/gpi/app-intents", obj(app+"-placement", map[string]any{
		"app": app, "intent": map[string]any{"allOf": []any{map[string]any{"clusterProvider": "cp", "cluster": c.Name}}}}))
	o.must(201, "POST", digPath+"/intents", obj("intents", map[string]any{"intent": map[string]any{"genericPlacementIntent": "gpi"}}))
	o.must(202, "POST", digPath+"/approve", nil)
}

// A process killed between an instantiate's lifecycle write and its
// context write (simulated: the lifecycle written as Instantiate writes
// it, no context) leaves, after a restart, a DIG whose status says the
// instantiation was lost, which terminates and instantiates again.
func TestLostContextIsRepairedAtStart(t *testing.T) {
	sharedClusters(t)
	db, prefix := testenv.UniqueName("lost"), "/"+testenv.UniqueName("lost")
	o := startOrchestrator(t, db, prefix)
	onboardOne(t, o, "frontend", testenv.Archive(t, "testdata/charts/frontend"))
	o.stop()

	dig := catalog.Key{"p1", "ca", "v1", "dig1"}
	id := appcontext.NewID()
	next := catalog.StateAction{State: catalog.StateInstantiated, ContextID: id, TimeStamp: time.Now().UTC(), Revision: 1}
	if _, err := o.catalog.TransitionDIG(t.Context(), dig, []string{catalog.StateApproved}, next, id); err != nil {
		t.Fatal(err)
	}

	o = startOrchestrator(t, db, prefix)
	st := o.waitJSON(digPath+"/status", "the lost instantiation reported", deployedStatusIs(appcontext.InstantiateFailed))
	if !strings.Contains(fmt.Sprint(st), "terminate and instantiate again") {
		t.Errorf("status does not say what happened: %v", st)
	}
	o.must(202, "POST", digPath+"/terminate", nil)
	o.waitJSON(digPath+"/status", "terminated", deployedStatusIs(appcontext.Terminated))
	o.must(202, "POST", digPath+"/instantiate", nil)
	next2 := o.digState().ContextID
	if next2 == id {
		t.Fatal("the instantiate reused the lost context")
	}
	o.waitContext(next2, "applied after the repair", allResources(appcontext.RsyncApplied))
	o.must(202, "POST", digPath+"/terminate", nil)
	o.waitContext(next2, "terminated", allResources(appcontext.RsyncDeleted))
}
