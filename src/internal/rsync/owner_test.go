package rsync

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/argus-mc/argus/src/internal/appcontext"
)

func TestJudgeOwnership(t *testing.T) {
	mine := appcontext.Meta{Group: "dig:p/ca/v1/one", StatusID: "11"}
	adopting := mine
	adopting.SyncPolicy.Adopt = true
	obj := func(ann, labels map[string]string, managers ...string) metav1.Object {
		o := &metav1.ObjectMeta{Annotations: ann, Labels: labels}
		for _, m := range managers {
			o.ManagedFields = append(o.ManagedFields, metav1.ManagedFieldsEntry{Manager: m})
		}
		return o
	}
	cases := map[string]struct {
		live        metav1.Object
		meta        appcontext.Meta
		ours, adopt bool
		owner       string
	}{
		"its own":                       {obj(map[string]string{"argus.io/owner": "dig:p/ca/v1/one"}, nil), mine, true, false, ""},
		"its status context (migrated)": {obj(map[string]string{"argus.io/owner": "dig:p/ca/v0/old"}, map[string]string{"argus.io/context-id": "11"}), mine, true, false, ""},
		"labelled by an older argus":    {obj(nil, map[string]string{"argus.io/context-id": "11"}), mine, true, false, ""},
		"another DIG's":                 {obj(map[string]string{"argus.io/owner": "dig:p/ca/v1/two"}, map[string]string{"argus.io/context-id": "22"}), mine, false, false, "deployment intent group p/ca/v1/two"},
		"another instance's":            {obj(map[string]string{"argus.io/owner": "instance:33"}, nil), mine, false, false, "v1 instance 33"},
		"an older argus context":        {obj(nil, map[string]string{"argus.io/context-id": "44"}), mine, false, false, "Argus context 44"},
		"a Helm release's":              {obj(map[string]string{"meta.helm.sh/release-name": "web", "meta.helm.sh/release-namespace": "apps"}, nil), mine, false, false, "Helm release apps/web"},
		"made by hand":                  {obj(nil, nil, "kubectl-create", "kubectl-edit", "kubectl-create"), mine, false, false, "no Argus deployment (written by kubectl-create, kubectl-edit)"},
		"adoptable, but not adopting":   {obj(map[string]string{"argus.io/adopt": "true"}, nil, "kubectl"), mine, false, false, "no Argus deployment (written by kubectl)"},
		"adopting, not adoptable":       {obj(nil, nil, "kubectl"), adopting, false, false, "no Argus deployment (written by kubectl)"},
		"adopting an adoptable":         {obj(map[string]string{"argus.io/adopt": "true"}, nil, "kubectl"), adopting, false, true, "no Argus deployment (written by kubectl)"},
	}
	for name, c := range cases {
		v := judge(c.live, c.meta)
		if v.ours != c.ours || v.adopt != c.adopt || v.owner != c.owner {
			t.Errorf("%s: %+v, want ours=%v adopt=%v owner=%q", name, v, c.ours, c.adopt, c.owner)
		}
	}
	if msg := (errOwned{owner: "deployment intent group p/ca/v1/two"}).Error(); !strings.HasPrefix(msg, "owned by deployment intent group p/ca/v1/two;") {
		t.Errorf("refusal reads %q", msg)
	}
}

func TestOnlyDIGsAndInstancesAreGuarded(t *testing.T) {
	for group, want := range map[string]bool{"dig:p/ca/v/d": true, "instance:1": true, "lc:p/c": false, "cluster:cp+c": false} {
		if guarded(appcontext.Meta{Group: group}) != want {
			t.Errorf("%s guarded = %v", group, !want)
		}
	}
}

func TestHealStreaks(t *testing.T) {
	t0 := time.Now()
	var h *appcontext.Heal
	h = h.Next(appcontext.HealBySelfHeal, "OutOfSync", t0)
	h = h.Next(appcontext.HealBySelfHeal, "OutOfSync", t0.Add(time.Minute))
	if h.Count != 2 || h.Streak != 2 || h.By != "self-heal" {
		t.Fatalf("after two heals a minute apart: %+v", h)
	}
	h = h.Next(appcontext.HealBySync, "Missing", t0.Add(time.Minute+appcontext.HealStreakWindow))
	if h.Count != 3 || h.Streak != 1 || h.Was != "Missing" {
		t.Fatalf("after a quiet window: %+v", h)
	}
}
