package monitor

import (
	"fmt"
	"sort"
	"strings"
	"unicode"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/argus-mc/argus/src/apis/k8splugin/v1alpha1"
)

// builtinKinds are the kinds always watched, with the status list each
// one's entries go to (SPEC section 2).
func builtinKinds() map[schema.GroupVersionKind]string {
	return map[schema.GroupVersionKind]string{
		{Version: "v1", Kind: "Pod"}:                                 "podStatuses",
		{Group: "apps", Version: "v1", Kind: "Deployment"}:           "deploymentStatuses",
		{Version: "v1", Kind: "Service"}:                             "serviceStatuses",
		{Version: "v1", Kind: "ConfigMap"}:                           "configMapStatuses",
		{Version: "v1", Kind: "Secret"}:                              "secretStatuses",
		{Group: "apps", Version: "v1", Kind: "DaemonSet"}:            "daemonSetStatuses",
		{Group: "networking.k8s.io", Version: "v1", Kind: "Ingress"}: "ingressStatuses",
		{Group: "batch", Version: "v1", Kind: "Job"}:                 "jobStatuses",
		{Group: "apps", Version: "v1", Kind: "StatefulSet"}:          "statefulSetStatuses",
		{Group: "apps", Version: "v1", Kind: "ReplicaSet"}:           "replicaSetStatuses",
		{Version: "v1", Kind: "PersistentVolumeClaim"}:               "persistentVolumeClaimStatuses",
		{Group: "batch", Version: "v1", Kind: "CronJob"}:             "cronJobStatuses",
	}
}

// listFor names the status list for a kind; "" means resourceStatuses.
// It goes by group and kind, so a typed kind served at another version
// still lands in its own list.
func listFor(gk schema.GroupKind) string {
	for gvk, list := range builtinKinds() {
		if gvk.GroupKind() == gk {
			return list
		}
	}
	return ""
}

// ParseGVKs parses a comma-separated list of kinds, each "group/version/Kind"
// or, for the core group, "version/Kind": for example
// "k8s.plugin.opnfv.org/v1alpha1/Network,v1/ServiceAccount".
func ParseGVKs(s string) ([]schema.GroupVersionKind, error) {
	var out []schema.GroupVersionKind
	seen := map[schema.GroupVersionKind]bool{}
	for _, item := range strings.Split(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		parts := strings.Split(item, "/")
		var gvk schema.GroupVersionKind
		switch len(parts) {
		case 2:
			gvk = schema.GroupVersionKind{Version: parts[0], Kind: parts[1]}
		case 3:
			gvk = schema.GroupVersionKind{Group: parts[0], Version: parts[1], Kind: parts[2]}
			if gvk.Group == "" {
				return nil, fmt.Errorf("kind %q: empty group (write version/Kind for the core group)", item)
			}
		default:
			return nil, fmt.Errorf("kind %q: want group/version/Kind or version/Kind", item)
		}
		if gvk.Version == "" || gvk.Kind == "" {
			return nil, fmt.Errorf("kind %q: version and kind are required", item)
		}
		if !unicode.IsUpper(rune(gvk.Kind[0])) {
			return nil, fmt.Errorf("kind %q: a kind starts with an upper-case letter", item)
		}
		if strings.ContainsAny(item, " \t") {
			return nil, fmt.Errorf("kind %q: contains spaces", item)
		}
		if gvk == v1alpha1.GVK() {
			return nil, fmt.Errorf("kind %q: the monitor never tracks ResourceBundleStates", item)
		}
		if !seen[gvk] {
			seen[gvk] = true
			out = append(out, gvk)
		}
	}
	return out, nil
}

// formatGVK renders a kind as ParseGVKs reads it.
func formatGVK(gvk schema.GroupVersionKind) string {
	if gvk.Group == "" {
		return gvk.Version + "/" + gvk.Kind
	}
	return gvk.Group + "/" + gvk.Version + "/" + gvk.Kind
}

func sortGVKs(l []schema.GroupVersionKind) {
	sort.Slice(l, func(i, j int) bool { return formatGVK(l[i]) < formatGVK(l[j]) })
}

func schemaGVK(g v1alpha1.GroupVersionKind) schema.GroupVersionKind {
	return schema.GroupVersionKind{Group: g.Group, Version: g.Version, Kind: g.Kind}
}

func apiGVK(g schema.GroupVersionKind) v1alpha1.GroupVersionKind {
	return v1alpha1.GroupVersionKind{Group: g.Group, Version: g.Version, Kind: g.Kind}
}
