package deploy

import (
	"errors"
	"testing"

	"github.com/argus-mc/argus/src/internal/appcontext"
	"github.com/argus-mc/argus/src/internal/catalog"
	"github.com/argus-mc/argus/src/internal/errdefs"
)

func TestConfigVersionsAndTags(t *testing.T) {
	c := catalog.InstanceConfigSpec{
		History: []catalog.ConfigVersion{
			{Action: catalog.ConfigCreated, Content: catalog.ConfigContent{ConfigName: "c", Values: catalog.Values{"v": 1}}},
			{Action: catalog.ConfigUpdated, Content: catalog.ConfigContent{ConfigName: "c", Values: catalog.Values{"v": 2}}},
			{Action: catalog.ConfigDeleted, Content: catalog.ConfigContent{ConfigName: "c", Values: catalog.Values{"v": 2}}},
		},
		Tags: []catalog.ConfigTag{{Version: 1, Tag: "first"}},
	}
	if c.Current() != 3 || c.Active() {
		t.Fatalf("current %d active %v: a config whose last action is DELETE has no resources", c.Current(), c.Active())
	}
	for _, tc := range []struct {
		version, tag string
		want         uint
		err          error
	}{
		{version: "2", want: 2},
		{tag: "first", want: 1},
		{tag: "nope", err: errdefs.ErrNotFound},
		{version: "two", err: errdefs.ErrInvalid},
		{err: errdefs.ErrInvalid},
	} {
		got, err := resolveVersion(c, tc.version, tc.tag)
		if got != tc.want || !errors.Is(err, tc.err) && (err != nil || tc.err != nil) {
			t.Errorf("resolve(%q, %q) = %d, %v; want %d, %v", tc.version, tc.tag, got, err, tc.want, tc.err)
		}
	}
	if v := viewAt(c, 1); v.ConfigTag != "first" || v.Values["v"] != 1 || v.ConfigVersion != 1 {
		t.Errorf("version 1 = %+v", v)
	}
	if v := viewAt(c, 2); v.ConfigTag != "" || v.Values["v"] != 2 {
		t.Errorf("version 2 = %+v", v)
	}
}

func TestV1Status(t *testing.T) {
	for in, want := range map[string]string{
		appcontext.Instantiating: "CREATING", appcontext.Instantiated: "DONE", appcontext.InstantiateFailed: "CREATE-FAILED",
		appcontext.Updating: "UPGRADING", appcontext.Updated: "DONE", appcontext.UpdateFailed: "UPGRADE-FAILED",
		appcontext.Terminating: "DELETING", appcontext.Terminated: "DELETED", appcontext.TerminateFailed: "DELETE-FAILED",
	} {
		if got := V1Status(in); got != want {
			t.Errorf("V1Status(%s) = %s, want %s", in, got, want)
		}
	}
}
