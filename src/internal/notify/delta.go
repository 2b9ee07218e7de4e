package notify

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"sort"
	"strings"
)

// Entry is one resource as a subscriber sees it: its key, the payload entry
// sent for it, and the digest of what counts as a change.
type Entry struct {
	Key     string
	Payload map[string]any
	Digest  string
}

// Digest hashes what makes a resource "modified" (SPEC section 8): its
// readiness and reason, its rsync and cluster status, and its object's
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

// Changes are the resource-changes of a notification.
type Changes struct {
	Created  []map[string]any `json:"created"`
	Deleted  []map[string]any `json:"deleted"`
	Modified []map[string]any `json:"modified"`
}

// Empty reports whether nothing changed.
func (c Changes) Empty() bool { return len(c.Created)+len(c.Deleted)+len(c.Modified) == 0 }

// Diff compares the current entries with the digests last delivered and
// returns the changes and the digests to remember once they are delivered.
// deletedPayload gives the payload of a resource that is gone (only its
// key is known); nil sends {"key": key}.
func Diff(last map[string]string, current []Entry, deletedPayload func(key string) map[string]any) (Changes, map[string]string) {
	ch := Changes{Created: []map[string]any{}, Deleted: []map[string]any{}, Modified: []map[string]any{}}
	next := make(map[string]string, len(current))
	for _, e := range current {
		next[e.Key] = e.Digest
		prev, seen := last[e.Key]
		switch {
		case !seen:
			ch.Created = append(ch.Created, e.Payload)
		case prev != e.Digest:
			ch.Modified = append(ch.Modified, e.Payload)
		}
	}
	var gone []string
	for key := range last {
		if _, ok := next[key]; !ok {
			gone = append(gone, key)
		}
	}
	sort.Strings(gone)
	for _, key := range gone {
		p := map[string]any{"key": key}
		if deletedPayload != nil {
			if dp := deletedPayload(key); dp != nil {
				p = dp
			}
		}
		ch.Deleted = append(ch.Deleted, p)
	}
	return ch, next
}

// ResourceKey identifies one resource of a subscription's view. Its string
// form is the key deltas are computed by, and a deleted resource's payload
// is rebuilt from it, since only digests of delivered states are kept.
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

// ParseResourceKey reverses String.
func ParseResourceKey(s string) (ResourceKey, bool) {
	f := strings.Split(s, "|")
	if len(f) != 8 {
		return ResourceKey{}, false
	}
	return ResourceKey{f[0], f[1], f[2], f[3], f[4], f[5], f[6], f[7]}, true
}

// DeletedPayload is the payload of a resource known only by its key.
func DeletedPayload(key string) map[string]any {
	k, ok := ParseResourceKey(key)
	if !ok {
		return nil
	}
	return k.Payload()
}
