package cli

import (
	"encoding/json"
	"regexp"
	"sort"
	"strings"
	"time"

	"github.com/argus-mc/argus/src/internal/status"
)

// node is one line of a status tree: an app, a cluster, a resource, or an
// owner the status does not list (a ReplicaSet between a Deployment and
// its Pods).
type node struct {
	namespace              string
	ready, sync, reason    string
	rsync, clusterStatus   string
	kind, name             string
	virtual                bool
	children               []*node
	owners                 []status.Owner
	resourceGroup, version string
}

// severity orders what is wrong, worst first: Failed; NotPresent or
// Missing; OutOfSync; Pending or Terminating; Unknown; then what is fine.
func severity(ready, sync string) int {
	switch {
	case ready == "Failed":
		return 0
	case ready == "NotPresent" || sync == "Missing":
		return 1
	case sync == "OutOfSync":
		return 2
	case ready == "Pending" || ready == "Terminating":
		return 3
	case ready == "Unknown" || sync == "Unknown":
		return 4
	}
	return 5
}

// wrong reports a resource that is not Ready or not Synced.
func wrong(ready, sync string) bool { return severity(ready, sync) < 5 }

// resourceKey identifies a resource or owner within one cluster.
func resourceKey(group, kind, namespace, name string) string {
	return group + "/" + kind + "/" + namespace + "/" + name
}

// clusterTree arranges one cluster's resources by owner: a Pod under its
// ReplicaSet under its Deployment, a Job's Pod under the Job. An owner the
// status does not list (a ReplicaSet) becomes a line of its own; a
// resource whose owners are all unlisted stays at the top.
func clusterTree(resources []*node) []*node {
	byKey := map[string]*node{}
	for _, r := range resources {
		byKey[resourceKey(r.resourceGroup, r.kind, r.namespace, r.name)] = r
	}
	var top []*node
	for _, r := range resources {
		listed := -1
		for i, o := range r.owners {
			if byKey[resourceKey(o.GVK.Group, o.GVK.Kind, r.namespace, o.Name)] != nil {
				listed = i
				break
			}
		}
		if listed < 0 {
			top = append(top, r)
			continue
		}
		parent := byKey[resourceKey(r.owners[listed].GVK.Group, r.owners[listed].GVK.Kind, r.namespace, r.owners[listed].Name)]
		for i := listed - 1; i >= 0; i-- {
			o := r.owners[i]
			k := resourceKey(o.GVK.Group, o.GVK.Kind, r.namespace, o.Name)
			v := byKey[k]
			if v == nil {
				v = &node{kind: o.GVK.Kind, name: o.Name, namespace: r.namespace, resourceGroup: o.GVK.Group, version: o.GVK.Version, virtual: true}
				byKey[k] = v
				parent.children = append(parent.children, v)
			}
			parent = v
		}
		parent.children = append(parent.children, r)
	}
	sortNodes(top)
	return top
}

// sortNodes orders lines by kind and name, recursively.
func sortNodes(l []*node) {
	sort.SliceStable(l, func(i, j int) bool {
		if l[i].kind != l[j].kind {
			return l[i].kind < l[j].kind
		}
		return l[i].name < l[j].name
	})
	for _, n := range l {
		sortNodes(n.children)
	}
}

// ownersFromObject reads a resource's owners from its object, for answers
// that carry objects but not owners (a v1 instance's status): the
// controller, then — for a Pod of a ReplicaSet named <deployment>-<its
// pod-template-hash> — that Deployment.
func ownersFromObject(obj json.RawMessage) []status.Owner {
	var o struct {
		Metadata struct {
			Labels          map[string]string `json:"labels"`
			OwnerReferences []struct {
				APIVersion string `json:"apiVersion"`
				Kind       string `json:"kind"`
				Name       string `json:"name"`
				Controller *bool  `json:"controller"`
			} `json:"ownerReferences"`
		} `json:"metadata"`
	}
	if len(obj) == 0 || json.Unmarshal(obj, &o) != nil || len(o.Metadata.OwnerReferences) == 0 {
		return nil
	}
	ref := o.Metadata.OwnerReferences[0]
	for _, r := range o.Metadata.OwnerReferences {
		if r.Controller != nil && *r.Controller {
			ref = r
		}
	}
	group, version, found := strings.Cut(ref.APIVersion, "/")
	if !found {
		group, version = "", ref.APIVersion
	}
	out := []status.Owner{{GVK: status.GVK{Group: group, Version: version, Kind: ref.Kind}, Name: ref.Name}}
	hash := o.Metadata.Labels["pod-template-hash"]
	if ref.Kind == "ReplicaSet" && hash != "" && strings.HasSuffix(ref.Name, "-"+hash) {
		out = append(out, status.Owner{GVK: status.GVK{Group: "apps", Version: "v1", Kind: "Deployment"}, Name: strings.TrimSuffix(ref.Name, "-"+hash)})
	}
	return out
}

// rfc3339 finds the times the API writes into reasons ("monitor silent
// since 2026-01-01T10:00:00Z").
var rfc3339 = regexp.MustCompile(`\b\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:Z|[+-]\d{2}:\d{2})`)

// timeFormat is how every time is shown: local, with the zone.
const timeFormat = "2006-01-02 15:04:05 MST"

// localTimes rewrites the RFC 3339 times in a reason in timeFormat.
func localTimes(s string, loc *time.Location) string {
	return rfc3339.ReplaceAllStringFunc(s, func(t string) string {
		v, err := time.Parse(time.RFC3339Nano, t)
		if err != nil {
			return t
		}
		return v.In(loc).Format(timeFormat)
	})
}
