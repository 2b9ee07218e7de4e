package status

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"strings"
)

// Entry is one resource as the status engine reports it to whoever
// follows changes (the notifier, the history recorder): a key, the payload
// entry describing it, and the digest of what counts as a change.
// Consumers adapt it; the status engine knows none of them.
type Entry struct {
	Key     string
	Payload map[string]any
	Digest  string
}

// Runs are a view's entries in runs, in order (a placement's each, when
// they come from the memo). A run is never changed once handed out: one
// handed out again (the same first element and length) holds the same
// entries, so a consumer that compared it before can skip it.
type Runs [][]Entry

// Len is how many entries the runs hold.
func (r Runs) Len() int {
	n := 0
	for _, run := range r {
		n += len(run)
	}
	return n
}

// Digest hashes what makes a resource "modified" (SPEC section 8): its
// readiness and reason, its rsync status (with its sync state and heal
// count) and cluster status, and its object's
// .status, canonicalised so key order and formatting do not count. Metadata
// — resourceVersion, managedFields — is never part of it.
func Digest(readyStatus, reason, rsyncStatus, clusterStatus string, status json.RawMessage) string {
	var canonical any
	if len(status) > 0 {
		_ = json.Unmarshal(status, &canonical)
	}
	data, _ := json.Marshal([]any{readyStatus, reason, rsyncStatus, clusterStatus, canonical})
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:16])
}

// ResourceKey identifies one resource of a status answer. Its string form
// is the key deltas are computed by, and a deleted resource's payload is
// rebuilt from it, since consumers keep only digests of what they saw.
type ResourceKey struct {
	App, ClusterProvider, Cluster string
	Group, Version, Kind          string
	Namespace, Name               string
}

// String joins the fields with "|", which no name or kind may contain.
func (k ResourceKey) String() string {
	return strings.Join([]string{k.App, k.ClusterProvider, k.Cluster, k.Group, k.Version, k.Kind, k.Namespace, k.Name}, "|")
}

// Payload is the identity part of a resource's payload entry.
func (k ResourceKey) Payload() map[string]any {
	p := map[string]any{
		"app": k.App, "cluster-provider": k.ClusterProvider, "cluster": k.Cluster,
		"GVK":  map[string]string{"Group": k.Group, "Version": k.Version, "Kind": k.Kind},
		"name": k.Name,
	}
	if k.Namespace != "" {
		p["namespace"] = k.Namespace
	}
	return p
}

// KeyCluster is "<provider>+<cluster>" of a key String made, without
// parsing it whole (it runs per resource per change); "_" for a key of
// another shape.
func KeyCluster(key string) string {
	_, rest, ok := strings.Cut(key, "|")
	if !ok {
		return "_"
	}
	provider, rest, ok := strings.Cut(rest, "|")
	if !ok {
		return "_"
	}
	cluster, _, ok := strings.Cut(rest, "|")
	if !ok || provider == "" || cluster == "" {
		return "_"
	}
	return provider + "+" + cluster
}

// ParseResourceKey reverses String.
func ParseResourceKey(s string) (ResourceKey, bool) {
	f := strings.Split(s, "|")
	if len(f) != 8 {
		return ResourceKey{}, false
	}
	return ResourceKey{f[0], f[1], f[2], f[3], f[4], f[5], f[6], f[7]}, true
}
