package notify

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"sort"
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
