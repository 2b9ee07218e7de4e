package catalog

import (
	"context"
	"errors"
	"testing"
	"time"

	"go.mongodb.org/mongo-driver/bson"
	"go.mongodb.org/mongo-driver/mongo"
	"go.mongodb.org/mongo-driver/mongo/options"

	"github.com/argus-mc/argus/src/internal/errdefs"
)

// goneDB is a database of a client already disconnected: every operation
// on it fails at once, as on a MongoDB that went away.
func goneDB(t *testing.T, name string) *mongo.Database {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cli, err := mongo.Connect(ctx, options.Client().ApplyURI(env.MongoURI()))
	if err != nil {
		t.Fatal(err)
	}
	if err := cli.Disconnect(ctx); err != nil {
		t.Fatal(err)
	}
	return cli.Database(name)
}

// With MongoDB gone, a lifecycle's state is still read (from the index,
// as every write put it there), while a transition is refused as
// unavailable and changes nothing.
func TestStateReadWhileMongoDBIsDown(t *testing.T) {
	t.Run("indexed", func(t *testing.T) {
		c, ctx := newCatalog(t)
		dig := Key{"p", "ca", "v1", "dig"}
		next := StateAction{State: StateInstantiated, ContextID: "ctx1", TimeStamp: time.Now().UTC().Truncate(time.Millisecond), Revision: NextRevision}
		if _, err := c.TransitionDIG(ctx, dig, []string{StateCreated, StateApproved}, next, "s1"); err != nil {
			t.Fatal(err)
		}
		waitIntents(t, c)
		db := c.db
		c.db = goneDB(t, db.Name())
		c.availableFn = func() error { return errdefs.Unavailable(nil, "MongoDB does not answer") }
		st, err := c.GetDIGState(ctx, dig)
		if err != nil {
			t.Fatalf("state while MongoDB is down: %v", err)
		}
		if st.Current != StateInstantiated || st.ContextID != "ctx1" || st.StatusContextID != "s1" || len(st.Actions) != 1 || st.Actions[0].Revision != 1 {
			t.Fatalf("state while MongoDB is down: %+v", st)
		}
		if st, err := c.GetDIGState(ctx, Key{"p", "ca", "v1", "other"}); err != nil || st.Current != StateCreated {
			t.Fatalf("a DIG never acted on while MongoDB is down: %+v %v", st, err)
		}
		next.State = StateTerminated
		if _, err := c.TransitionDIG(ctx, dig, []string{StateInstantiated}, next, ""); !errors.Is(err, errdefs.ErrUnavailable) {
			t.Fatalf("a transition while MongoDB is down: %v, want unavailable", err)
		}
		c.db, c.availableFn = db, nil
		waitIntents(t, c)
		if st, err := c.GetDIGState(ctx, dig); err != nil || st.Current != StateInstantiated {
			t.Fatalf("state after the refused transition: %+v %v", st, err)
		}
	})
}

// A lifecycle write whose writer died between MongoDB and the index
// leaves its intent; the repairer copies the state into the index while
// every replica runs on, so readers of the index see what MongoDB has.
func TestLifecycleIntentOfADeadWriterIsRepaired(t *testing.T) {
	t.Run("indexed", func(t *testing.T) {
		c, ctx := newCatalog(t)
		lease := owned(t, c, "writer")
		group := DIGGroup(Key{"p", "ca", "v1", "dig"})
		in, err := c.begin(ctx, c.index(), lifecycles, Key{group}, intentContent{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.digStates().InsertOne(ctx, append(groupFilter(group), bson.E{Key: "current", Value: StateInstantiated},
			bson.E{Key: "actions", Value: []StateAction{{State: StateInstantiated, ContextID: "c"}}}, bson.E{Key: "contextId", Value: "c"})); err != nil {
			t.Fatal(err)
		}
		c.inflight.Delete(in.key) // the writer is gone
		if st, _ := c.GetState(ctx, group); st.Current != StateCreated {
			t.Fatalf("the index has the state before any repair: %+v", st)
		}
		other, _ := newCatalog(t)
		other.db = c.db
		other.idx = c.index()
		owned(t, other, "repairer")
		runRepairs(t, other)
		if _, err := env.Etcd.Client.Revoke(ctx, lease); err != nil {
			t.Fatal(err)
		}
		waitIntents(t, c)
		if st, err := c.GetState(ctx, group); err != nil || st.Current != StateInstantiated || st.ContextID != "c" {
			t.Fatalf("the repaired index's state: %+v %v", st, err)
		}
	})
}

// A delete stopped after it removed the children that go with their
// parent (Cascade) from MongoDB, before the index: the intent's repair
// removes their entries too, so no reader gets a child MongoDB lost.
func TestStoppedDeleteLeavesNoCascadedEntry(t *testing.T) {
	t.Run("indexed", func(t *testing.T) {
		subs := &Kind{Name: "test sub", Collection: "testsubs", Parent: Projects, Cascade: true}
		c, ctx := newCatalogOf(t, Projects, subs)
		owned(t, c, "writer")
		if err := For[Empty](c, Projects).Create(ctx, Key{"p"}, project("p")); err != nil {
			t.Fatal(err)
		}
		children := For[Empty](c, subs)
		for _, n := range []string{"s1", "s2"} {
			if err := children.Create(ctx, Key{"p", n}, project(n)); err != nil {
				t.Fatal(err)
			}
		}
		in, err := c.begin(ctx, c.index(), Projects, Key{"p"}, intentContent{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.db.Collection(subs.Collection).DeleteMany(ctx, bson.D{{Key: "project", Value: "p"}}); err != nil {
			t.Fatal(err)
		}
		_ = in.end(errors.New("the store went away")) // what a failed delete does
		if _, err := children.Get(ctx, Key{"p", "s1"}); err != nil {
			t.Fatalf("the index lost the child before any repair: %v", err)
		}
		runRepairs(t, c)
		waitIntents(t, c)
		for _, n := range []string{"s1", "s2"} {
			if _, err := children.Get(ctx, Key{"p", n}); !errors.Is(err, errdefs.ErrNotFound) {
				t.Fatalf("child %s after the repair: %v, want not found", n, err)
			}
		}
		if _, err := For[Empty](c, Projects).Get(ctx, Key{"p"}); err != nil {
			t.Fatalf("the parent MongoDB kept: %v", err)
		}
	})
}

// A create that answered an error leaves no object, even one MongoDB
// carried out in full after the error (it had the requests in hand when
// it stopped answering): the intent's repair removes the document it
// names, visible or not.
func TestFailedCreateLeavesNoObject(t *testing.T) {
	t.Run("indexed", func(t *testing.T) {
		c, ctx := newCatalog(t)
		owned(t, c, "writer")
		projects := For[Empty](c, Projects)
		since := time.Now().UTC().Truncate(time.Millisecond)
		// Inserted and made visible, but the create saw neither answer.
		in := visibleCreate(ctx, t, c, "late", intentContent{Pending: &since})
		_ = in.end(errdefs.Unavailable(nil, "MongoDB does not answer"))
		runRepairs(t, c)
		waitIntents(t, c)
		if _, err := projects.Get(ctx, Key{"late"}); !errors.Is(err, errdefs.ErrNotFound) {
			t.Fatalf("the failed create's object after the repair: %v", err)
		}
		if n, _ := c.db.Collection(Projects.Collection).CountDocuments(ctx, bson.D{{Key: "project", Value: "late"}}); n != 0 {
			t.Fatalf("MongoDB keeps %d documents of the failed create", n)
		}
		if err := projects.Create(ctx, Key{"late"}, project("late")); err != nil {
			t.Fatalf("create after the repair: %v", err)
		}
		waitIntents(t, c)
	})
}
