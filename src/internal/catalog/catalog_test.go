package catalog

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/argus-mc/argus/src/internal/errdefs"
	"github.com/argus-mc/argus/src/internal/testenv"
)

var env *testenv.Stores

func TestMain(m *testing.M) { testenv.Main(m, func(s *testenv.Stores) { env = s }) }

// A child kind, to test hierarchy rules without depending on later kinds.
type appSpec struct {
	Version string `json:"version" bson:"version"`
}

var testApps = &Kind{Name: "test app", Collection: "testapps", Parent: Projects}

func newCatalog(t *testing.T) (*Catalog, context.Context) {
	t.Helper()
	return newCatalogOf(t, Projects, testApps)
}

// TestWithIndex runs the catalogue's tests again with the etcd index on:
// every guarantee holds the same way.
func TestWithIndex(t *testing.T) {
	for name, f := range map[string]func(*testing.T){
		"CRUD": TestCRUD, "Hierarchy": TestHierarchy, "V1Cascade": TestV1CascadeAndJSONValues,
		"CreateWithContent": TestCreateWithContentIsAtomicForReaders, "DeleteMarksFirst": TestDeleteMarksFirst,
		"ChildrenDuringDelete": TestChildrenCreatedDuringParentDelete, "Content": TestContentChunksAndGenerations,
		"StaleMarkers": TestStaleMarkersAreTakenOver, "LockForDelete": TestLockForDelete,
	} {
		t.Run(name+"/indexed", f)
	}
}

func project(name string) Object[Empty] {
	return Object[Empty]{Metadata: Metadata{Name: name, Description: "d"}}
}

func TestCRUD(t *testing.T) {
	c, ctx := newCatalog(t)
	projects := For[Empty](c, Projects)

	if err := projects.Create(ctx, Key{"p1"}, project("p1")); err != nil {
		t.Fatal(err)
	}
	if err := projects.Create(ctx, Key{"p1"}, project("p1")); !errors.Is(err, errdefs.ErrConflict) {
		t.Fatalf("duplicate create: err = %v, want conflict", err)
	}
	got, err := projects.Get(ctx, Key{"p1"})
	if err != nil || got.Metadata.Description != "d" {
		t.Fatalf("get = %+v, %v", got, err)
	}
	if _, err := projects.Get(ctx, Key{"nope"}); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("get missing: err = %v", err)
	}

	upd := project("p1")
	upd.Metadata.Description = "changed"
	created, err := projects.Put(ctx, Key{"p1"}, upd)
	if err != nil || created {
		t.Fatalf("put existing: created=%v err=%v", created, err)
	}
	created, err = projects.Put(ctx, Key{"p2"}, project("p2"))
	if err != nil || !created {
		t.Fatalf("put new: created=%v err=%v", created, err)
	}
	// The upserted document must carry its key field (FerretDB does not copy it from the filter).
	if got, err := projects.Get(ctx, Key{"p2"}); err != nil || got.Metadata.Name != "p2" {
		t.Fatalf("get upserted = %+v, %v", got, err)
	}

	list, err := projects.List(ctx, Key{})
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 2 || list[0].Metadata.Name != "p1" || list[0].Metadata.Description != "changed" || list[1].Metadata.Name != "p2" {
		t.Fatalf("list = %+v", list)
	}

	if err := projects.Delete(ctx, Key{"p1"}); err != nil {
		t.Fatal(err)
	}
	if err := projects.Delete(ctx, Key{"p1"}); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("second delete: err = %v", err)
	}
}

func TestHierarchy(t *testing.T) {
	c, ctx := newCatalog(t)
	projects := For[Empty](c, Projects)
	apps := For[appSpec](c, testApps)

	app := Object[appSpec]{Metadata: Metadata{Name: "a"}, Spec: appSpec{Version: "v1"}}
	if err := apps.Create(ctx, Key{"p1", "a"}, app); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("create under missing parent: err = %v", err)
	}
	if _, err := apps.List(ctx, Key{"p1"}); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("list under missing parent: err = %v", err)
	}
	for _, p := range []string{"p1", "p2"} {
		if err := projects.Create(ctx, Key{p}, project(p)); err != nil {
			t.Fatal(err)
		}
	}
	if err := apps.Create(ctx, Key{"p1", "a"}, app); err != nil {
		t.Fatal(err)
	}
	// The same child name under another parent is a different object.
	if err := apps.Create(ctx, Key{"p2", "a"}, app); err != nil {
		t.Fatal(err)
	}
	if list, err := apps.List(ctx, Key{"p1"}); err != nil || len(list) != 1 || list[0].Spec.Version != "v1" {
		t.Fatalf("list = %+v, %v", list, err)
	}
	err := projects.Delete(ctx, Key{"p1"})
	if !errors.Is(err, errdefs.ErrConflict) {
		t.Fatalf("delete project in use: err = %v", err)
	}
	if err.Error() != `project "p1" is in use: it still has test apps` {
		t.Fatalf("message = %q", err.Error())
	}
	if err := apps.Delete(ctx, Key{"p1", "a"}); err != nil {
		t.Fatal(err)
	}
	if err := projects.Delete(ctx, Key{"p1"}); err != nil {
		t.Fatal(err)
	}
	if _, err := apps.Get(ctx, Key{"p2", "a"}); err != nil {
		t.Fatalf("sibling's child must survive: %v", err)
	}
}

func TestValidateName(t *testing.T) {
	for name, ok := range map[string]bool{
		"p1": true, "A.b_c-d": true, "": false, "-x": false, "a b": false, "a/b": false,
		strings.Repeat("a", 128): true, strings.Repeat("a", 129): false,
	} {
		err := ValidateName("project", name)
		if (err == nil) != ok {
			t.Errorf("ValidateName(%q) = %v, want ok=%v", name, err, ok)
		}
		if err != nil && !errors.Is(err, errdefs.ErrInvalid) {
			t.Errorf("ValidateName(%q) error kind = %v", name, err)
		}
	}
}

// A definition's profiles and their uploaded contents go with it; values
// whose keys hold dots are stored as JSON text and come back intact.
func TestV1CascadeAndJSONValues(t *testing.T) {
	c, ctx := newCatalogOf(t, V1Kinds()...)
	defs := For[RBDefinitionSpec](c, RBDefinitions)
	profiles := For[RBProfileSpec](c, RBProfiles)
	def := Key{"rb", "v1"}
	labels := Labels{"app.kubernetes.io/name": "rb"}
	if err := defs.Create(ctx, def, Object[RBDefinitionSpec]{Metadata: Metadata{Name: "rb"}, Spec: RBDefinitionSpec{Labels: labels}}); err != nil {
		t.Fatalf("labels with dotted keys: %v", err)
	}
	if got, err := defs.Get(ctx, def); err != nil || got.Spec.Labels["app.kubernetes.io/name"] != "rb" {
		t.Fatalf("labels = %v %v", got.Spec.Labels, err)
	}
	for _, p := range []string{"default", "p1"} {
		if err := profiles.Create(ctx, Key{"rb", "v1", p}, Object[RBProfileSpec]{Metadata: Metadata{Name: p}}); err != nil {
			t.Fatal(err)
		}
		if err := profiles.PutContent(ctx, Key{"rb", "v1", p}, []byte("tgz")); err != nil {
			t.Fatal(err)
		}
	}
	if err := defs.Delete(ctx, def); err != nil {
		t.Fatalf("delete a definition with profiles: %v", err)
	}
	if err := defs.Create(ctx, def, Object[RBDefinitionSpec]{Metadata: Metadata{Name: "rb"}}); err != nil {
		t.Fatal(err)
	}
	if l, err := profiles.List(ctx, def); err != nil || len(l) != 0 {
		t.Fatalf("profiles after the definition was deleted and made again: %v %v", l, err)
	}
	if _, err := profiles.GetContent(ctx, Key{"rb", "v1", "p1"}); !errors.Is(err, errdefs.ErrNotFound) {
		t.Fatalf("a deleted profile's content survived: %v", err)
	}

	conns := For[ConnectivitySpec](c, ConnectivityInfos)
	spec := ConnectivitySpec{CloudRegion: "r1", CloudOwner: "o", Other: ConnectivityRecords{Records: []map[string]string{{"FQDN.or.ip": "a.b"}}}}
	if err := conns.Create(ctx, Key{"r1"}, Object[ConnectivitySpec]{Metadata: Metadata{Name: "r1"}, Spec: spec}); err != nil {
		t.Fatalf("records with dotted keys: %v", err)
	}
	got, err := conns.Get(ctx, Key{"r1"})
	if err != nil || got.Spec.Other.Records[0]["FQDN.or.ip"] != "a.b" {
		t.Fatalf("records = %+v %v", got.Spec.Other, err)
	}
	cfgs := For[InstanceConfigSpec](c, InstanceConfigs)
	if err := For[InstanceSpec](c, Instances).Create(ctx, Key{"1"}, Object[InstanceSpec]{Metadata: Metadata{Name: "1"}}); err != nil {
		t.Fatal(err)
	}
	cfg := InstanceConfigSpec{History: []ConfigVersion{{Action: ConfigCreated, Content: ConfigContent{ConfigName: "c",
		Values: Values{"image.tag": "1", "nested": map[string]any{"a.b": true}}}}}}
	if err := cfgs.Create(ctx, Key{"1", "c"}, Object[InstanceConfigSpec]{Metadata: Metadata{Name: "c"}, Spec: cfg}); err != nil {
		t.Fatalf("config values with dotted keys: %v", err)
	}
	back, err := cfgs.Get(ctx, Key{"1", "c"})
	if err != nil || back.Spec.History[0].Content.Values["image.tag"] != "1" || !back.Spec.Active() || back.Spec.Current() != 1 {
		t.Fatalf("config = %+v %v", back.Spec, err)
	}
}

// Revisions number one context's desired states: its instantiation is 1,
// each update the next, counted as the status counted them for lifecycles
// recorded before revisions were; NextRevision is resolved in the
// transition's own conditional write.
func TestRevisions(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	legacy := DIGState{Actions: []StateAction{{State: StateApproved}, {State: StateInstantiated, ContextID: "1"},
		{State: StateUpdated, ContextID: "1"}, {State: StateUpdated, ContextID: "1"}, {State: StateTerminated, ContextID: "1"},
		{State: StateInstantiated, ContextID: "2", Revision: 1}}}
	if got := legacy.LatestRevision("1"); got != 3 {
		t.Errorf("legacy context 1: latest revision %d, want 3", got)
	}
	if got := legacy.LatestRevision("2"); got != 1 {
		t.Errorf("context 2: latest revision %d, want 1", got)
	}
	c, err := prepare(ctx, env.Database(t), Projects, CompositeApps, DeploymentIntentGroups)
	if err != nil {
		t.Fatal(err)
	}
	dig := Key{"p", "ca", "v1", "dig"}
	step := func(from []string, state string, rev int64) DIGState {
		t.Helper()
		st, err := c.TransitionDIG(ctx, dig, from, StateAction{State: state, ContextID: "9", TimeStamp: time.Now(), Revision: rev}, "")
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	step([]string{StateCreated}, StateApproved, 0)
	step([]string{StateApproved}, StateInstantiated, 1)
	for want := int64(2); want <= 4; want++ {
		st := step([]string{StateInstantiated, StateUpdated}, StateUpdated, NextRevision)
		if got := st.Actions[len(st.Actions)-1].Revision; got != want {
			t.Fatalf("update: revision %d, want %d", got, want)
		}
	}
}
