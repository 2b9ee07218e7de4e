package heal

import (
	"context"
	"errors"
	"net/url"
	"testing"
	"time"

	"github.com/argus-mc/argus/src/internal/appcontext"
	"github.com/argus-mc/argus/src/internal/deploy"
	"github.com/argus-mc/argus/src/internal/errdefs"
)

type fakes struct {
	ctx     *appcontext.Context
	drifted []appcontext.Drifted
	healed  [][]string
	busy    bool
	owns    bool
}

func (f *fakes) Latest(context.Context, string) (string, error) { return f.ctx.Meta.ID, nil }
func (f *fakes) View(_ context.Context, _ string, fn func(*appcontext.Context, map[appcontext.ClusterRef]appcontext.ClusterState)) error {
	fn(f.ctx, nil)
	return nil
}
func (f *fakes) Groups(context.Context) ([]string, error) { return []string{f.ctx.Meta.Group}, nil }
func (f *fakes) Drifted(context.Context, string, url.Values) ([]appcontext.Drifted, error) {
	return f.drifted, nil
}
func (f *fakes) Owns(string) bool { return f.owns }
func (f *fakes) Sync(_ context.Context, _, _ string, _ url.Values, by string, pick func(appcontext.Drifted) bool) (deploy.SyncResult, error) {
	if f.busy {
		return deploy.SyncResult{}, errdefs.Conflict("busy")
	}
	var names []string
	for _, d := range f.drifted {
		if pick(d) {
			names = append(names, by+":"+d.Name)
		}
	}
	f.healed = append(f.healed, names)
	return deploy.SyncResult{}, nil
}

func drifted(name string, applied time.Time, h *appcontext.Heal) appcontext.Drifted {
	return appcontext.Drifted{HealTarget: appcontext.HealTarget{App: "sink", Key: "Deployment/default/" + name, Name: name, Was: "OutOfSync"},
		Applied: applied, Heal: h}
}

func TestSelfHealWaitsThenHealsAndBacksOff(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC)
	now := t0
	f := &fakes{owns: true, ctx: &appcontext.Context{Meta: appcontext.Meta{ID: "1", Group: "dig:p/ca/v/d",
		SyncPolicy: appcontext.SyncPolicy{SelfHeal: true}}, Status: appcontext.Status{Status: appcontext.Instantiated}}}
	c, err := New(Options{Contexts: f, Drift: f, Healer: f, Owner: f, Delay: 2 * time.Second, MaxBackoff: 30 * time.Second,
		Now: func() time.Time { return now }})
	if err != nil {
		t.Fatal(err)
	}
	check := func() time.Duration {
		t.Helper()
		after, err := c.check(context.Background(), "dig:p/ca/v/d")
		if err != nil {
			t.Fatal(err)
		}
		return after
	}
	// Seen drifted now: due after the delay, not before.
	f.drifted = []appcontext.Drifted{drifted("sink", t0.Add(-time.Hour), nil)}
	if after := check(); after != 2*time.Second || len(f.healed) != 0 {
		t.Fatalf("at once: look again in %s, healed %v", after, f.healed)
	}
	now = t0.Add(2 * time.Second)
	check()
	if len(f.healed) != 1 || f.healed[0][0] != "self-heal:sink" {
		t.Fatalf("after the delay: healed %v", f.healed)
	}
	// Undone at once, for the third time in a row: the next heal waits
	// Delay·2^3 after the last.
	last := now
	f.drifted = []appcontext.Drifted{drifted("sink", last, &appcontext.Heal{Count: 3, Streak: 3, Last: last})}
	now = last.Add(3 * time.Second)
	if after := check(); len(f.healed) != 1 || after != 13*time.Second {
		t.Fatalf("backing off: healed %v, look again in %s", f.healed, after)
	}
	now = last.Add(16 * time.Second)
	check()
	if len(f.healed) != 2 {
		t.Fatalf("after the backoff: healed %v", f.healed)
	}
	// A busy group is looked at again after the delay; a group without
	// self-heal, or another replica's, is left alone.
	now = now.Add(time.Hour)
	f.drifted = []appcontext.Drifted{drifted("other", t0, nil)}
	c.seen = map[string]map[string]time.Time{"dig:p/ca/v/d": {key(f.drifted[0]): t0}}
	f.busy = true
	if _, err := c.check(context.Background(), "dig:p/ca/v/d"); !errors.Is(err, errdefs.ErrConflict) {
		t.Fatalf("busy: %v", err)
	}
	f.busy = false
	f.ctx.Meta.SyncPolicy.SelfHeal = false
	if after := check(); after != 0 || len(f.healed) != 2 {
		t.Fatalf("self-heal off: healed %v", f.healed)
	}
	f.ctx.Meta.SyncPolicy.SelfHeal, f.owns = true, false
	if check(); len(f.healed) != 2 {
		t.Fatalf("not the owner: healed %v", f.healed)
	}
	if b := c.backoff(40); b != 30*time.Second {
		t.Fatalf("backoff is not capped: %s", b)
	}
}
