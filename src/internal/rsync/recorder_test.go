package rsync

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/sirupsen/logrus"
	logtest "github.com/sirupsen/logrus/hooks/test"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"

	"github.com/argus-mc/argus/src/internal/appcontext"
	etcdstore "github.com/argus-mc/argus/src/internal/store/etcd"
)

// TestRecorderEndsWhileEtcdRefusesWrites: a recorder whose writes fail
// stops retrying when its action finishes (finish returns within its final
// wait, not after etcd recovers) or when the process stops (before finish is
// called). Etcd refuses in two ways: a server whose NOSPACE alarm is raised
// answers every write at once with an error, and the action ends while the
// loop waits to retry; through a partition a write hangs, and the action
// ends while it is in flight.
func TestRecorderEndsWhileEtcdRefusesWrites(t *testing.T) {
	const finalWait = time.Second
	const bound = 15 * time.Second // finalWait plus CI headroom; without the fix it never ends
	for name, setup := range map[string]func(t *testing.T) refusal{"NOSPACE": noSpaceStore, "partitioned": partitionedStore} {
		for _, ending := range []string{"finish", "process stops"} {
			t.Run(name+"/"+ending, func(t *testing.T) {
				r := setup(t)
				id := createContext(t, r.store, manifest("v1", "ConfigMap", "a", "default", nil), manifest("v1", "ConfigMap", "b", "default", nil))
				c, err := r.store.Get(context.Background(), id)
				if err != nil {
					t.Fatal(err)
				}
				logger, hook := logtest.NewNullLogger()
				proc, stopProc := context.WithCancel(context.Background())
				defer stopProc()
				rec := newRecorder(proc, r.store, c, applyNames, logrus.NewEntry(logger), finalWait)
				p := c.Placements[0]
				rec.record(p, p.Resources[0].Key(), appcontext.ResourceStatus{Status: appcontext.RsyncApplied})
				waitFor(t, r.store, id, "the first status written before etcd refuses", func(c *appcontext.Context) bool {
					return statusOf(c, p.Resources[0].Key()).Status == appcontext.RsyncApplied
				})

				r.refuse()
				rec.record(p, p.Resources[1].Key(), appcontext.ResourceStatus{Status: appcontext.RsyncApplied})
				poll(t, bound, "a write refused or in flight", func() bool { return r.failing(hook) })
				start := time.Now()
				if ending == "process stops" {
					stopProc()
					poll(t, bound, "the retries given up after the process stopped", func() bool { return logged(hook, msgGivingUp) })
					t.Logf("retries ended %v after the process stopped", time.Since(start).Round(time.Millisecond))
				}
				done := make(chan struct{})
				go func() { defer close(done); rec.finish(ending == "process stops") }()
				select {
				case <-done:
				case <-time.After(bound):
					stopProc() // lets a fixed recorder end; an unfixed one retries on
					t.Fatalf("finish still waiting %v after the action ended while etcd refused writes", bound)
				}
				t.Logf("finish returned %v after the action ended", time.Since(start).Round(time.Millisecond))
				if !logged(hook, msgGivingUp) {
					t.Fatal("finish returned without giving up the refused writes")
				}
			})
		}
	}
}

const (
	msgRetrying = "cannot record rsync statuses; retrying"
	msgGivingUp = "giving up recording rsync statuses"
)

// refusal is a store whose etcd refuses writes once refuse is called;
// failing reports that the recorder's write after that failed or is in
// flight.
type refusal struct {
	store   *appcontext.Store
	refuse  func()
	failing func(*logtest.Hook) bool
}

func logged(hook *logtest.Hook, msg string) bool {
	for _, e := range hook.AllEntries() {
		if e.Message == msg {
			return true
		}
	}
	return false
}

// poll waits (up to d) until cond holds.
func poll(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(d); !cond(); time.Sleep(10 * time.Millisecond) { // polling with a deadline
		if !time.Now().Before(deadline) {
			t.Fatalf("%s: not within %v", what, d)
		}
	}
}

// noSpaceStore is a store on a private embedded etcd (the alarm is
// cluster-wide); refuse raises its NOSPACE alarm, as a full backend does,
// after which the server refuses every write.
func noSpaceStore(t *testing.T) refusal {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	es, err := etcdstore.Open(ctx, etcdstore.Options{DataDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = es.Close() })
	r := refusal{store: appcontext.New(appcontext.Options{Client: es.Client, Prefix: "/t/"})}
	r.failing = func(hook *logtest.Hook) bool { return logged(hook, msgRetrying) }
	r.refuse = func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		st, err := es.Client.Status(ctx, es.Endpoints()[0])
		if err != nil {
			t.Fatal(err)
		}
		if _, err := pb.NewMaintenanceClient(es.Client.ActiveConnection()).Alarm(ctx, &pb.AlarmRequest{
			Action: pb.AlarmRequest_ACTIVATE, MemberID: st.Header.MemberId, Alarm: pb.AlarmType_NOSPACE}); err != nil {
			t.Fatal(err)
		}
		if _, err := es.Client.Put(ctx, "/t/probe", "x"); err == nil || !strings.Contains(err.Error(), "space exceeded") {
			t.Fatalf("a write with the NOSPACE alarm raised: %v, want refused", err)
		}
	}
	return r
}

// partitionedStore is a store on the package's etcd reached through a
// loopback proxy; refuse stalls it: from then on nothing is forwarded, so
// a write sent hangs until its deadline.
func partitionedStore(t *testing.T) refusal {
	cli, px := env.EtcdBehindProxy(t)
	return refusal{store: appcontext.New(appcontext.Options{Client: cli, Prefix: env.EtcdPrefix()}),
		refuse:  px.Stall,
		failing: func(*logtest.Hook) bool { return px.Swallowed() > 0 }}
}
