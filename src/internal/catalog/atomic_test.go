package catalog

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/bson"

	"github.com/argus-mc/argus/src/internal/errdefs"
)

// An object created with content is invisible until its content is stored:
// readers never see one without the other, and Recover removes what a
// killed process left half done.
func TestCreateWithContentIsAtomicForReaders(t *testing.T) {
	c, ctx := newCatalog(t)
	projects := For[Empty](c, Projects)
	apps := For[appSpec](c, testApps)
	if err := projects.Create(ctx, Key{"p"}, project("p")); err != nil {
		t.Fatal(err)
	}
	if err := apps.CreateWithContent(ctx, Key{"p", "a"}, Object[appSpec]{Metadata: Metadata{Name: "a"}}, []byte("chart")); err != nil {
		t.Fatal(err)
	}
	if b, err := apps.GetContent(ctx, Key{"p", "a"}); err != nil || string(b) != "chart" {
		t.Fatalf("content = %q, %v", b, err)
	}
	if err := apps.CreateWithContent(ctx, Key{"p", "a"}, Object[appSpec]{Metadata: Metadata{Name: "a"}}, []byte("x")); !errors.Is(err, errdefs.ErrConflict) {
		t.Fatalf("duplicate: %v", err)
	}

	// What a process killed between its two writes leaves: an intent, and
	// content without an object.
	killedAt := time.Now().UTC().Add(-time.Second)
	raw := c.db.Collection(testApps.Collection)
	if _, err := raw.InsertOne(ctx, bson.D{{Key: "project", Value: "p"}, {Key: "testapp", Value: "half"},
		{Key: "metadata", Value: bson.D{{Key: "name", Value: "half"}}}, {Key: fieldPending, Value: killedAt}}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.db.Collection(testApps.Collection+"_content").InsertOne(ctx, bson.D{{Key: "project", Value: "p"},
		{Key: "testapp", Value: "orphan"}, {Key: "content", Value: []byte("x")}}); err != nil {
		t.Fatal(err)
	}
	if _, err := apps.Get(ctx, Key{"p", "half"}); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("a pending object is visible: %v", err)
	}
	if list, err := apps.List(ctx, Key{"p"}); err != nil || len(list) != 1 {
		t.Fatalf("list = %+v, %v; want only the complete app", list, err)
	}
	if _, err := apps.GetContent(ctx, Key{"p", "orphan"}); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("content without an object is visible: %v", err)
	}
	if err := projects.Delete(ctx, Key{"p"}); !errors.Is(err, errdefs.ErrConflict) {
		t.Fatalf("delete a project with a pending app: %v, want 409", err)
	}
	rec, err := c.repair(ctx, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	// Start-up reads no content: the intent goes, and content without an
	// object (left by a writer that left no intent in etcd either) stays,
	// unread.
	if rec.Intents != 1 || rec.Orphans != 0 {
		t.Fatalf("recovered %+v", rec)
	}
	if n, _ := raw.CountDocuments(ctx, bson.D{{Key: "testapp", Value: "half"}}); n != 0 {
		t.Fatalf("the intent survived Recover: %d", n)
	}
	if _, err := apps.GetContent(ctx, Key{"p", "orphan"}); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("content without an object is visible: %v", err)
	}
	if b, err := apps.GetContent(ctx, Key{"p", "a"}); err != nil || string(b) != "chart" {
		t.Fatalf("the complete app lost its content: %q, %v", b, err)
	}
}

// A delete marks its object first: creates under it are refused from then
// on, and a delete that fails leaves it as it was.
func TestDeleteMarksFirst(t *testing.T) {
	c, ctx := newCatalog(t)
	projects := For[Empty](c, Projects)
	apps := For[appSpec](c, testApps)
	if err := projects.Create(ctx, Key{"p"}, project("p")); err != nil {
		t.Fatal(err)
	}
	var during error
	err := projects.Delete(ctx, Key{"p"}, func(ctx context.Context) error {
		during = apps.Create(ctx, Key{"p", "a"}, Object[appSpec]{Metadata: Metadata{Name: "a"}})
		if _, err := projects.Get(ctx, Key{"p"}); err != nil {
			t.Errorf("a project being deleted is still readable: %v", err)
		}
		if err := projects.Delete(ctx, Key{"p"}); !errors.Is(err, errdefs.ErrConflict) {
			t.Errorf("a second delete: %v, want 409", err)
		}
		return errors.New("changed my mind")
	})
	if err == nil || err.Error() != "changed my mind" {
		t.Fatalf("delete = %v", err)
	}
	if !errors.Is(during, errdefs.ErrConflict) {
		t.Fatalf("create under a project being deleted: %v, want 409", during)
	}
	if err := projects.Alive(ctx, Key{"p"}); err != nil {
		t.Fatalf("an aborted delete left a mark: %v", err)
	}
	if err := apps.Create(ctx, Key{"p", "a"}, Object[appSpec]{Metadata: Metadata{Name: "a"}}); err != nil {
		t.Fatal(err)
	}
	// A stale mark (the process died mid-delete) is cleared by Recover.
	if _, err := c.db.Collection(Projects.Collection).UpdateOne(ctx, bson.D{{Key: "project", Value: "p"}},
		bson.D{{Key: "$set", Value: bson.D{{Key: fieldDeleting, Value: time.Now().Add(-time.Minute)}}}}); err != nil {
		t.Fatal(err)
	}
	if rec, err := c.repair(ctx, time.Now()); err != nil || rec.Unmarked != 1 {
		t.Fatalf("recover = %+v, %v", rec, err)
	}
	if err := projects.Alive(ctx, Key{"p"}); err != nil {
		t.Fatal(err)
	}
}

// Children created while their parent is deleted: the delete fails with
// 409, or every child is gone with it. Never a child without its parent.
func TestChildrenCreatedDuringParentDelete(t *testing.T) {
	c, ctx := newCatalog(t)
	projects := For[Empty](c, Projects)
	apps := For[appSpec](c, testApps)
	outcomes := map[string]int{}
	for round := range 20 {
		if err := projects.Create(ctx, Key{"p"}, project("p")); err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		created := make([]error, 8)
		for i := range created {
			wg.Go(func() {
				name := fmt.Sprintf("a%d", i)
				obj := Object[appSpec]{Metadata: Metadata{Name: name}}
				if i%2 == 0 {
					created[i] = apps.Create(ctx, Key{"p", name}, obj)
				} else {
					created[i] = apps.CreateWithContent(ctx, Key{"p", name}, obj, []byte("c"))
				}
			})
		}
		var delErr error
		wg.Go(func() { delErr = projects.Delete(ctx, Key{"p"}) })
		wg.Wait()
		left, _ := c.db.Collection(testApps.Collection).CountDocuments(ctx, bson.D{{Key: "project", Value: "p"}})
		contents, _ := c.db.Collection(testApps.Collection+"_content").CountDocuments(ctx, bson.D{{Key: "project", Value: "p"}})
		switch {
		case delErr == nil:
			outcomes["deleted"]++
			if left != 0 || contents != 0 {
				t.Fatalf("round %d: the project is gone but %d apps and %d contents are left (creates: %v)", round, left, contents, created)
			}
		case errors.Is(delErr, errdefs.ErrConflict):
			outcomes["409"]++
			ok := int64(0)
			for _, err := range created {
				if err == nil {
					ok++
				}
			}
			if list, err := apps.List(ctx, Key{"p"}); err != nil || int64(len(list)) != ok || left != ok {
				t.Fatalf("round %d: %d creates succeeded, list %d (%v), stored %d", round, ok, len(list), err, left)
			}
			for i := range created {
				_ = apps.Delete(ctx, Key{"p", fmt.Sprintf("a%d", i)})
			}
			if err := projects.Delete(ctx, Key{"p"}); err != nil {
				t.Fatal(err)
			}
		default:
			t.Fatalf("round %d: delete = %v", round, delErr)
		}
	}
	t.Logf("outcomes: %v", outcomes)
}

func TestLockForDelete(t *testing.T) {
	c, ctx := newCatalogOf(t, Projects)
	group := "dig:p/ca/v1/d"
	subject := "the deployment intent group"
	from := []string{StateCreated, StateApproved, StateTerminated}
	// Never acted on: the lock creates the lifecycle and unlock removes it.
	if err := c.LockForDelete(ctx, group, subject, from); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Transition(ctx, group, subject, []string{StateCreated, StateApproved}, StateAction{State: StateApproved}, ""); !errors.Is(err, errdefs.ErrConflict) {
		t.Fatalf("approve while deleting: %v, want 409", err)
	}
	if err := c.UnlockForDelete(ctx, group); err != nil {
		t.Fatal(err)
	}
	if _, exists, _ := c.getState(ctx, group); exists {
		t.Fatal("unlock of a fresh lifecycle left it behind")
	}
	if st, err := c.GetState(ctx, group); err != nil || st.Current != StateCreated {
		t.Fatalf("after unlocking a fresh lifecycle: %+v, %v", st, err)
	}
	// Acted on: unlock restores the state and keeps the history.
	if _, err := c.Transition(ctx, group, subject, []string{StateCreated}, StateAction{State: StateApproved}, ""); err != nil {
		t.Fatal(err)
	}
	if err := c.LockForDelete(ctx, group, subject, from); err != nil {
		t.Fatal(err)
	}
	if err := c.LockForDelete(ctx, group, subject, from); !errors.Is(err, errdefs.ErrConflict) {
		t.Fatalf("second lock: %v", err)
	}
	if err := c.UnlockForDelete(ctx, group); err != nil {
		t.Fatal(err)
	}
	st, err := c.GetState(ctx, group)
	if err != nil || st.Current != StateApproved || len(st.Actions) != 1 {
		t.Fatalf("after unlock: %+v, %v", st, err)
	}
	// An instantiated lifecycle cannot be locked.
	if _, err := c.Transition(ctx, group, subject, []string{StateApproved}, StateAction{State: StateInstantiated, ContextID: "1"}, "1"); err != nil {
		t.Fatal(err)
	}
	if err := c.LockForDelete(ctx, group, subject, from); !errors.Is(err, errdefs.ErrConflict) {
		t.Fatalf("lock an instantiated lifecycle: %v", err)
	}
}

// Content is stored in chunks, switched by generation: a replacement is
// seen whole or not at all, a PUT of the object keeps it, and files stored
// whole before chunking still load.
func TestContentChunksAndGenerations(t *testing.T) {
	c, ctx := newCatalog(t)
	projects := For[Empty](c, Projects)
	apps := For[appSpec](c, testApps)
	if err := projects.Create(ctx, Key{"p"}, project("p")); err != nil {
		t.Fatal(err)
	}
	big := make([]byte, 3*contentChunk+12345)
	for i := range big {
		big[i] = byte(i * 7)
	}
	key := Key{"p", "a"}
	if err := apps.CreateWithContent(ctx, key, Object[appSpec]{Metadata: Metadata{Name: "a"}}, big); err != nil {
		t.Fatal(err)
	}
	chunks := func() int64 {
		n, _ := c.db.Collection(testApps.Collection+"_content").CountDocuments(ctx, bson.D{{Key: "testapp", Value: "a"}})
		return n
	}
	if n := chunks(); n != 4 {
		t.Fatalf("%d chunks, want 4", n)
	}
	if b, err := apps.GetContent(ctx, key); err != nil || !bytes.Equal(b, big) {
		t.Fatalf("read back %d bytes, %v", len(b), err)
	}
	if _, err := apps.Put(ctx, key, Object[appSpec]{Metadata: Metadata{Name: "a", Description: "new"}, Spec: appSpec{Version: "v2"}}); err != nil {
		t.Fatal(err)
	}
	if b, err := apps.GetContent(ctx, key); err != nil || !bytes.Equal(b, big) {
		t.Fatalf("a PUT of the object lost its content: %d bytes, %v", len(b), err)
	}
	if err := apps.PutContent(ctx, key, []byte("small")); err != nil {
		t.Fatal(err)
	}
	if b, err := apps.GetContent(ctx, key); err != nil || string(b) != "small" || chunks() != 1 {
		t.Fatalf("after replacement: %q, %v, %d chunks", b, err, chunks())
	}
	// An interrupted replacement: chunks of a generation nobody points at.
	if _, err := c.db.Collection(testApps.Collection+"_content").InsertOne(ctx, bson.D{{Key: "project", Value: "p"}, {Key: "testapp", Value: "a"},
		{Key: "gen", Value: time.Now().Add(-time.Minute)}, {Key: "seq", Value: 0}, {Key: "data", Value: []byte("half")}}); err != nil {
		t.Fatal(err)
	}
	if b, _ := apps.GetContent(ctx, key); string(b) != "small" {
		t.Fatalf("a stray generation is read: %q", b)
	}
	if rec, err := c.repair(ctx, time.Now()); err != nil || rec.Orphans != 0 || chunks() != 2 {
		t.Fatalf("recover (which reads no content) = %+v, %v; %d chunks", rec, err, chunks())
	}
	if _, err := c.db.Collection(testApps.Collection+"_content").DeleteMany(ctx, bson.D{{Key: "data", Value: []byte("half")}}); err != nil {
		t.Fatal(err)
	}
	// A file stored whole, as before chunking.
	if _, err := c.db.Collection(testApps.Collection).InsertOne(ctx, bson.D{{Key: "project", Value: "p"}, {Key: "testapp", Value: "old"},
		{Key: "metadata", Value: bson.D{{Key: "name", Value: "old"}}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.db.Collection(testApps.Collection+"_content").InsertOne(ctx, bson.D{{Key: "project", Value: "p"}, {Key: "testapp", Value: "old"},
		{Key: "content", Value: []byte("legacy")}}); err != nil {
		t.Fatal(err)
	}
	if rec, err := c.repair(ctx, time.Now()); err != nil || rec.Orphans != 0 {
		t.Fatalf("recover touched a legacy file: %+v, %v", rec, err)
	}
	reindex(t, ctx, c) // written behind the catalogue's back, as before the index

	if b, err := apps.GetContent(ctx, Key{"p", "old"}); err != nil || string(b) != "legacy" {
		t.Fatalf("legacy content: %q, %v", b, err)
	}
	if err := apps.PutContent(ctx, Key{"p", "old"}, []byte("chunked")); err != nil {
		t.Fatal(err)
	}
	if b, err := apps.GetContent(ctx, Key{"p", "old"}); err != nil || string(b) != "chunked" {
		t.Fatalf("replaced legacy content: %q, %v", b, err)
	}
	// The legacy document stays (finding it would read the whole
	// collection), unread: the object names its chunks now.
	n, _ := c.db.Collection(testApps.Collection+"_content").CountDocuments(ctx, bson.D{{Key: "testapp", Value: "old"}})
	if n != 2 {
		t.Fatalf("%d documents of the replaced legacy file, want the legacy one and the new chunk", n)
	}
	if err := apps.Delete(ctx, key); err != nil || chunks() != 0 {
		t.Fatalf("delete: %v, %d chunks left", err, chunks())
	}
}

// A killed process's write that lands after Recover (the store finished it
// after the client died) does not keep its name taken: the next create
// takes the name over, and its delete mark stops nothing.
func TestStaleMarkersAreTakenOver(t *testing.T) {
	c, ctx := newCatalog(t)
	projects := For[Empty](c, Projects)
	apps := For[appSpec](c, testApps)
	if err := projects.Create(ctx, Key{"p"}, project("p")); err != nil {
		t.Fatal(err)
	}
	if _, err := c.repair(ctx, time.Now()); err != nil {
		t.Fatal(err)
	}
	late := time.Now().UTC().Add(-time.Minute) // set by the dead process, landed now
	if _, err := c.db.Collection(testApps.Collection).InsertOne(ctx, bson.D{{Key: "project", Value: "p"}, {Key: "testapp", Value: "a"},
		{Key: "metadata", Value: bson.D{{Key: "name", Value: "a"}}}, {Key: fieldPending, Value: late}}); err != nil {
		t.Fatal(err)
	}
	if err := apps.CreateWithContent(ctx, Key{"p", "a"}, Object[appSpec]{Metadata: Metadata{Name: "a"}}, []byte("x")); err != nil {
		t.Fatalf("create over a dead intent: %v", err)
	}
	if _, err := c.db.Collection(Projects.Collection).UpdateOne(ctx, bson.D{{Key: "project", Value: "p"}},
		bson.D{{Key: "$set", Value: bson.D{{Key: fieldDeleting, Value: late}}}}); err != nil {
		t.Fatal(err)
	}
	if err := apps.Create(ctx, Key{"p", "b"}, Object[appSpec]{Metadata: Metadata{Name: "b"}}); err != nil {
		t.Fatalf("create under a dead delete mark: %v", err)
	}
	if err := projects.Delete(ctx, Key{"p"}); !errors.Is(err, errdefs.ErrConflict) || !strings.Contains(err.Error(), "still has") {
		t.Fatalf("delete over a dead mark: %v, want 409 for its apps", err)
	}
}

// reindex reconciles an indexed catalogue's index with MongoDB, as a
// start-up does, after a test wrote to MongoDB directly.
func reindex(t *testing.T, ctx context.Context, c *Catalog) {
	t.Helper()
	if x := c.index(); x != nil {
		if _, err := c.useIndex(ctx, x.cli, strings.TrimSuffix(x.prefix, "/catalog/")); err != nil {
			t.Fatal(err)
		}
	}
}
