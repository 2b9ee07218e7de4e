package health

import (
	"fmt"
	"strings"
)

// rank orders statuses for aggregation; Terminating and NotPresent rank as
// Pending.
func rank(s Status) int {
	switch s {
	case Ready:
		return 0
	case Pending, Terminating, NotPresent:
		return 1
	case Unknown:
		return 2
	case Failed:
		return 3
	}
	return 2 // an unrecognised status is as good as unknown
}

// Aggregate combines statuses for an app, a cluster, a DIG or an instance:
// any Failed → Failed; else any Unknown → Unknown; else any Terminating,
// Pending or NotPresent → Pending; else Ready. No statuses at all is Ready.
func Aggregate(statuses ...Status) Status {
	worst := 0
	for _, s := range statuses {
		worst = max(worst, rank(s))
	}
	return []Status{Ready, Pending, Unknown, Failed}[worst]
}

// Item is a named object's result, for Summarize.
type Item struct {
	Kind   string
	Name   string
	Result Result
}

// Summarize describes the items that are not Ready, worst first, at most max
// of them, e.g. "pod fw0-sink-0: CrashLoopBackOff; deployment fw0-sink: 1 of
// 2 replicas ready; and 3 more". It returns "" when every item is Ready.
func Summarize(items []Item, max int) string {
	var bad []Item
	for _, it := range items {
		if it.Result.Status != Ready {
			bad = append(bad, it)
		}
	}
	if len(bad) == 0 {
		return ""
	}
	// Stable: worst first, input order within a rank.
	ordered := make([]Item, 0, len(bad))
	for r := 3; r >= 1; r-- {
		for _, it := range bad {
			if rank(it.Result.Status) == r {
				ordered = append(ordered, it)
			}
		}
	}
	var parts []string
	for i, it := range ordered {
		if i == max {
			parts = append(parts, fmt.Sprintf("and %d more", len(ordered)-max))
			break
		}
		why := it.Result.Reason
		if why == "" {
			why = string(it.Result.Status)
		}
		parts = append(parts, fmt.Sprintf("%s %s: %s", strings.ToLower(it.Kind), it.Name, why))
	}
	return strings.Join(parts, "; ")
}
