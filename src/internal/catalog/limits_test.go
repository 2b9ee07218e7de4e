package catalog

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/argus-mc/argus/src/internal/errdefs"
)

// Writes past a limit are refused with ErrTooLarge naming the limit's
// flag, before anything is stored; what another catalogue (a replica)
// writes counts, through the index's watch; a write that shrinks an
// object always passes.
func TestLimits(t *testing.T) {
	c, ctx, prefix := indexed(t, Projects, testApps)
	c.setLimits(Limits{MaxObjectBytes: 4 << 10, MaxProjectBytes: 14 << 10, MaxTotalBytes: 20 << 10})
	follow, err := c.TrackUsage()
	if err != nil {
		t.Fatal(err)
	}
	fctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- follow(fctx) }()
	defer func() { stop(); <-done }()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) { // polling with a deadline
		if _, _, ok := c.Usage("p"); ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("usage never read")
		}
	}

	projects, apps := For[Empty](c, Projects), For[appSpec](c, testApps)
	big := Object[Empty]{Metadata: Metadata{Name: "p", Description: strings.Repeat("d", 5<<10)}}
	if err := projects.Create(ctx, Key{"p"}, big); !errors.Is(err, errdefs.ErrTooLarge) || !strings.Contains(err.Error(), FlagMaxObjectBytes) {
		t.Fatalf("a 5 KiB description: %v, want ErrTooLarge naming %s", err, FlagMaxObjectBytes)
	}
	if _, err := projects.Get(ctx, Key{"p"}); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("the refused project was stored: %v", err)
	}
	if err := projects.Create(ctx, Key{"p"}, project("p")); err != nil {
		t.Fatal(err)
	}
	if _, err := projects.Put(ctx, Key{"p"}, big); !errors.Is(err, errdefs.ErrTooLarge) {
		t.Fatalf("a PUT with a 5 KiB description: %v", err)
	}

	// Another catalogue on the same stores fills the project.
	other, _, err := Open(ctx, Options{DB: c.db, Kinds: []*Kind{Projects, testApps}, Index: c.idx.cli, IndexPrefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	app := func(name string, n int) Object[appSpec] {
		return Object[appSpec]{Metadata: Metadata{Name: name, Description: strings.Repeat("a", n)}}
	}
	for _, n := range []string{"a1", "a2", "a3"} {
		if err := For[appSpec](other, testApps).Create(ctx, Key{"p", n}, app(n, 3<<10)); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(30 * time.Second)
	for have, _, _ := c.Usage("p"); have < 9<<10; have, _, _ = c.Usage("p") {
		if time.Now().After(deadline) {
			t.Fatalf("the other catalogue's writes never counted: project holds %d", have)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := apps.Create(ctx, Key{"p", "a4"}, app("a4", 3<<10)); err != nil {
		t.Fatal(err)
	}
	err = apps.Create(ctx, Key{"p", "a5"}, app("a5", 3<<10))
	if !errors.Is(err, errdefs.ErrTooLarge) || !strings.Contains(err.Error(), FlagMaxProjectBytes) {
		t.Fatalf("past the project's limit: %v", err)
	}
	if _, err := apps.Put(ctx, Key{"p", "a1"}, app("a1", 10)); err != nil {
		t.Fatalf("shrinking an object in a full project: %v", err)
	}
	// The catalogue's limit holds across projects.
	if err := projects.Create(ctx, Key{"q"}, project("q")); err != nil {
		t.Fatal(err)
	}
	var refused error
	for _, n := range []string{"b1", "b2", "b3", "b4", "b5", "b6"} {
		if refused = apps.Create(ctx, Key{"q", n}, app(n, 3<<10)); refused != nil {
			break
		}
	}
	if !errors.Is(refused, errdefs.ErrTooLarge) || !strings.Contains(refused.Error(), FlagMaxTotalBytes) {
		t.Fatalf("past the catalogue's limit: %v", refused)
	}
}
