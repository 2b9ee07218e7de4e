package status

import (
	"github.com/argus-mc/argus/src/internal/appcontext"
	"github.com/argus-mc/argus/src/internal/health"
)

// Owner names an object that controls a resource: a Pod's ReplicaSet, that
// ReplicaSet's Deployment. Owners are listed nearest first; the namespace is
// the resource's.
type Owner struct {
	GVK  GVK    `json:"GVK"`
	Name string `json:"name"`
}

// maxOwners bounds an owner chain; real ones are two or three long.
const maxOwners = 8

// ownersOf follows an entry's controllers through the objects the bundle
// lists (ReplicaSets inherit the app's label, so a Pod's chain reaches its
// Deployment); the last owner may be one the bundle does not list.
func ownersOf(index appcontext.BundleIndex, e *appcontext.BundleEntry) []Owner {
	var out []Owner
	for e != nil && e.Owner.Kind != "" && len(out) < maxOwners {
		o := e.Owner
		out = append(out, Owner{GVK: GVK{Group: o.Group, Version: o.Version, Kind: o.Kind}, Name: o.Name})
		e, _ = lookup(index, o.Group, o.Kind, e.Namespace, o.Name)
	}
	return out
}

// linkOwners fills in the owners of a cluster's resources from its bundle
// and carries a failed pod up to the workload that owns it
// (health.Workload): a Deployment whose pod crash-loops is Failed with the
// pod's reason, not Pending. Every pod of the bundle counts, whether or
// not a filter lists it, so a filtered answer says what an unfiltered one
// does.
func linkOwners(rs []Resource, index appcontext.BundleIndex) {
	pods := map[ownerKey][]health.Item{}
	for _, e := range podEntries(index) {
		for _, o := range ownersOf(index, e) {
			k := ownerKey{o.GVK.Group, o.GVK.Kind, e.Namespace, o.Name}
			pods[k] = append(pods[k], health.Item{Kind: "Pod", Name: e.Name, Result: health.Result{Status: health.Status(e.ReadyStatus), Reason: e.Reason}})
		}
	}
	for i := range rs {
		r := &rs[i]
		if r.ClusterStatus != Present {
			continue
		}
		if e, found := lookup(index, r.GVK.Group, r.GVK.Kind, r.Namespace, r.Name); found {
			r.Owners = ownersOf(index, e)
		}
		mine := pods[ownerKey{r.GVK.Group, r.GVK.Kind, r.Namespace, r.Name}]
		if len(mine) == 0 {
			continue
		}
		got := health.Workload(health.Result{Status: health.Status(r.fine), Reason: r.Reason}, mine)
		if string(got.Status) != r.fine {
			r.ReadyStatus, r.fine, r.Reason = string(got.Status), string(got.Status), got.Reason
			r.ReadyStatusEMCO = emcoReadiness(r.ReadyStatus)
		}
	}
}

// ownerKey names a workload that owns pods; a struct, not a joined
// string, so a lookup per resource allocates nothing.
type ownerKey struct{ group, kind, namespace, name string }
