package watcher

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/argus-mc/argus/src/apis/k8splugin/v1alpha1"
	"github.com/argus-mc/argus/src/internal/health"
	"github.com/argus-mc/argus/src/internal/jsonlimit"
)

// What a ResourceBundleState's status read from a cluster may be. A cluster
// is untrusted input: whoever can write the CR there (a monitor, or anyone
// with RBAC on it) must not be able to bloat etcd, the status answers or
// the orchestrator's memory.
const (
	// MaxBundleBytes is the API server's object limit; the monitor trims
	// statuses to 1,000,000 bytes, and etcd takes values up to 1.5 MiB.
	MaxBundleBytes = 1_500_000
	// MaxBundleDepth bounds nesting: deep enough for any object a
	// workload carries (CRD schemas included), far below encoding/json's.
	MaxBundleDepth = 128
	// maxReason bounds an entry's reason, maxSummary the bundle's.
	maxReason  = 4096
	maxSummary = 16384
	// maxName bounds kinds, groups, versions, names and namespaces.
	maxName = 253
)

// CheckBundle is checkBundle for what reaches the orchestrator by other
// ways than a watch of the cluster (a pull cluster's agent reports its
// bundles): the same limits hold.
func CheckBundle(status []byte) error { return checkBundle(status) }

// checkBundle decodes a bundle status as read from a cluster and refuses
// one that breaks the limits above or carries a readiness the health
// vocabulary does not have. The error says why, for the status answer.
func checkBundle(status []byte) error {
	if len(status) > MaxBundleBytes {
		return fmt.Errorf("its status is %d bytes, more than %d", len(status), MaxBundleBytes)
	}
	if d := jsonlimit.Depth(status, MaxBundleDepth); d > MaxBundleDepth {
		return fmt.Errorf("its status nests deeper than %d levels", MaxBundleDepth)
	}
	var st v1alpha1.ResourceBundleStateStatus
	if err := json.Unmarshal(status, &st); err != nil {
		return fmt.Errorf("its status does not decode: %w", err)
	}
	if st.ResourceCount < 0 {
		return errors.New("its resourceCount is negative")
	}
	if len(st.Reason) > maxSummary {
		return fmt.Errorf("its reason is longer than %d bytes", maxSummary)
	}
	for _, k := range st.UnwatchedKinds {
		if err := names(k.Group, k.Version, k.Kind); err != nil || len(k.Reason) > maxReason {
			return fmt.Errorf("an unwatched kind is malformed")
		}
	}
	for _, list := range st.TypedLists() {
		for i := range *list {
			e := &(*list)[i]
			if err := entry(e.APIVersion+"/"+e.Kind, e.ReadyStatus, e.Reason, e.APIVersion, e.Kind); err != nil {
				return err
			}
			var meta struct{ Name, Namespace string }
			if len(e.Metadata.Raw) > 0 && json.Unmarshal(e.Metadata.Raw, &meta) != nil {
				return fmt.Errorf("a %s entry's metadata does not decode", e.Kind)
			}
			if err := names(meta.Name, meta.Namespace); err != nil {
				return fmt.Errorf("a %s entry: %w", e.Kind, err)
			}
		}
	}
	for i := range st.ResourceStatuses {
		e := &st.ResourceStatuses[i]
		if err := entry(e.Kind+" "+e.Name, e.ReadyStatus, e.Reason, e.Group, e.Version, e.Kind, e.Name, e.Namespace); err != nil {
			return err
		}
	}
	return nil
}

// entry checks one entry's readiness, reason and names.
func entry(what, ready, reason string, ids ...string) error {
	switch health.Status(ready) {
	case health.Ready, health.Pending, health.Failed, health.Terminating, health.NotPresent, health.Unknown:
	default:
		return fmt.Errorf("entry %.80q has readyStatus %.40q, not one of Ready, Pending, Failed, Terminating, NotPresent, Unknown", what, ready)
	}
	if len(reason) > maxReason {
		return fmt.Errorf("entry %.80q has a reason longer than %d bytes", what, maxReason)
	}
	if err := names(ids...); err != nil {
		return fmt.Errorf("entry %.80q: %w", what, err)
	}
	return nil
}

func names(ids ...string) error {
	for _, id := range ids {
		if len(id) > maxName {
			return fmt.Errorf("a name is longer than %d bytes", maxName)
		}
	}
	return nil
}
