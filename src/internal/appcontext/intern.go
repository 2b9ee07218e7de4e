package appcontext

import (
	"unique"

	"github.com/argus-mc/argus/src/apis/k8splugin/v1alpha1"
)

// intern returns s's canonical copy. A DIG placed on thousands of
// clusters decodes, on each, the same kinds, names, namespaces, statuses
// and hashes; the cache keeps every placement, so it keeps those strings
// once instead of once a cluster. A canonical copy no longer held by a
// handle is dropped at the next collection and made again by the next
// intern, so the saving holds between collections, and nothing is kept
// for strings the cache let go of.
func intern(s string) string {
	if s == "" {
		return s
	}
	return unique.Make(s).Value()
}

// internResource and the functions below intern the strings of what the
// cache keeps that repeat across clusters; per-cluster strings (cluster
// names, resource versions) are left alone.
func internResource(r *Resource) {
	r.GVK.Group, r.GVK.Version, r.GVK.Kind = intern(r.GVK.Group), intern(r.GVK.Version), intern(r.GVK.Kind)
	r.Name, r.Namespace = intern(r.Name), intern(r.Namespace)
	if r.ManifestRef != nil {
		r.ManifestRef.SHA256 = intern(r.ManifestRef.SHA256)
	}
}

func internStatus(st *ResourceStatus) {
	st.Status, st.Error, st.Manifest, st.Fields, st.Adopted = intern(st.Status), intern(st.Error), intern(st.Manifest), intern(st.Fields), intern(st.Adopted)
	for i, w := range st.Warnings {
		st.Warnings[i] = intern(w)
	}
}

func internBundle(st *v1alpha1.ResourceBundleStateStatus) {
	for _, l := range st.TypedLists() {
		for i := range *l {
			e := &(*l)[i]
			e.APIVersion, e.Kind, e.ReadyStatus, e.Reason, e.ManagedFieldsHash = intern(e.APIVersion), intern(e.Kind), intern(e.ReadyStatus), intern(e.Reason), intern(e.ManagedFieldsHash)
		}
	}
	for i := range st.ResourceStatuses {
		e := &st.ResourceStatuses[i]
		e.Group, e.Version, e.Kind, e.Name, e.Namespace = intern(e.Group), intern(e.Version), intern(e.Kind), intern(e.Name), intern(e.Namespace)
		e.ReadyStatus, e.Reason, e.ManagedFieldsHash = intern(e.ReadyStatus), intern(e.Reason), intern(e.ManagedFieldsHash)
	}
}
