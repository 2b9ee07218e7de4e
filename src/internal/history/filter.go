package history

import (
	"net/url"
	"time"

	"github.com/argus-mc/argus/src/internal/appcontext"
	"github.com/argus-mc/argus/src/internal/errdefs"
	"github.com/argus-mc/argus/src/internal/status"
)

// Filter selects entries: app, cluster and resource as a status query
// takes them (values of one ORed, different ones ANDed), and entries at or
// after Since. With any of app, cluster or resource set, only resource
// entries can match.
type Filter struct {
	status.Query
	Since time.Time
}

// ParseFilter reads app, cluster, resource and since (RFC 3339) from a
// query string, with a status query's bounds; a bad value is ErrInvalid.
func ParseFilter(v url.Values) (Filter, error) {
	sub := url.Values{"app": v["app"], "cluster": v["cluster"], "resource": v["resource"]}
	q, err := status.ParseQuery(sub)
	if err != nil {
		return Filter{}, err
	}
	f := Filter{Query: q}
	if s := v.Get("since"); s != "" {
		t, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			return Filter{}, errdefs.Invalid("since %.40q is not an RFC 3339 time (e.g. 2026-01-02T15:04:05Z)", s)
		}
		f.Since = t
	}
	return f, nil
}

// Match reports whether e passes the filter.
func (f Filter) Match(e Entry) bool {
	if !f.Since.IsZero() && e.Time.Before(f.Since) {
		return false
	}
	if !f.Filtered() {
		return true
	}
	if e.Resource == nil {
		return false
	}
	return f.Matches(e.App, appcontext.ClusterRef{Provider: e.ClusterProvider, Name: e.Cluster}, e.Resource.GVK.Kind, e.Resource.Name)
}
