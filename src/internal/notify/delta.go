package notify

import (
	"sort"

	"github.com/argus-mc/argus/src/internal/status"
)

// Entry is one resource as the status engine reports it; the notifier
// diffs entries by key and digest.
type Entry = status.Entry

// Runs are a view's entries in runs (see status.Runs): a run handed out
// again holds the same entries.
type Runs = status.Runs

// runSet names runs by their first element and length: a run handed out
// again is the same run (Runs). Holding the pointer keeps the run alive,
// so its address is never another run's.
type runSet map[*Entry]int

func (s runSet) has(run []Entry) bool {
	n, ok := s[&run[0]]
	return ok && n == len(run)
}

// reset makes s name runs, and nothing else.
func (s runSet) reset(runs Runs) {
	clear(s)
	for _, run := range runs {
		if len(run) > 0 {
			s[&run[0]] = len(run)
		}
	}
}

// Changes are the resource-changes of a notification.
type Changes struct {
	Created  []map[string]any `json:"created"`
	Deleted  []map[string]any `json:"deleted"`
	Modified []map[string]any `json:"modified"`
}

// Empty reports whether nothing changed.
func (c Changes) Empty() bool { return len(c.Created)+len(c.Deleted)+len(c.Modified) == 0 }

// diffDelta compares the current entries with the digests last delivered
// and returns the changes and, instead of every current digest, only the
// delta a delivery brings (created and modified) and the keys gone, as
// deltaOf would make them; deletedPayload gives the payload of a resource
// that is gone (only its key is known; nil sends {"key": key}): a notification then costs one lookup
// per current entry, not the maps of the whole subject (Diff's and
// deltaOf's were most of a notification at fleet size). Runs that clean
// names are known to match last entry for entry and are not looked at
// (nil: none), so a notification costs the runs that changed since the
// last delivery: at fleet size the lookups of 50,000 unchanged entries were
// most of what was left. Entry keys are unique within an answer (one per
// resource).
func diffDelta(last map[string]string, current Runs, clean runSet, deletedPayload func(key string) map[string]any) (Changes, map[string]string, []string) {
	ch := Changes{Created: []map[string]any{}, Deleted: []map[string]any{}, Modified: []map[string]any{}}
	delta := map[string]string{}
	found := 0
	for _, run := range current {
		if len(run) == 0 {
			continue
		}
		if clean.has(run) {
			found += len(run)
			continue
		}
		for _, e := range run {
			prev, seen := last[e.Key]
			switch {
			case !seen:
				ch.Created = append(ch.Created, e.Payload)
				delta[e.Key] = e.Digest
			case prev != e.Digest:
				ch.Modified = append(ch.Modified, e.Payload)
				delta[e.Key] = e.Digest
			}
			if seen {
				found++
			}
		}
	}
	var gone []string
	if found != len(last) { // some delivered key is no longer current
		present := make(map[string]struct{}, current.Len())
		for _, run := range current {
			for _, e := range run {
				present[e.Key] = struct{}{}
			}
		}
		for key := range last {
			if _, ok := present[key]; !ok {
				gone = append(gone, key)
			}
		}
		sort.Strings(gone)
	}
	for _, key := range gone {
		p := map[string]any{"key": key}
		if deletedPayload != nil {
			if dp := deletedPayload(key); dp != nil {
				p = dp
			}
		}
		ch.Deleted = append(ch.Deleted, p)
	}
	return ch, delta, gone
}

// digestsOf is every entry's digest by key.
func digestsOf(runs Runs) map[string]string {
	out := make(map[string]string, runs.Len())
	for _, run := range runs {
		for _, e := range run {
			out[e.Key] = e.Digest
		}
	}
	return out
}

// DeletedPayload is the payload of a resource known only by its key.
func DeletedPayload(key string) map[string]any {
	k, ok := status.ParseResourceKey(key)
	if !ok {
		return nil
	}
	return k.Payload()
}
