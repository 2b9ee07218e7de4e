package status

import (
	"net/url"
	"strconv"
	"strings"

	"github.com/argus-mc/argus/src/internal/appcontext"
	"github.com/argus-mc/argus/src/internal/errdefs"
	"github.com/argus-mc/argus/src/internal/syncstate"
)

// Types and outputs of a query.
const (
	TypeRsync   = "rsync"
	TypeCluster = "cluster"

	OutputSummary = "summary"
	OutputAll     = "all"
	OutputDetail  = "detail"
)

// Query is a parsed status query: values of one filter are ORed, different
// filters ANDed.
type Query struct {
	Type      string
	Output    string
	Apps      []string
	Clusters  []appcontext.ClusterRef
	Resources []string // a name, or Kind/name
	// Sync keeps the resources in these sync states (pods have none).
	Sync []string
	// Instance is set by ?instance=<id>; ListInstances by a bare ?instance.
	Instance      string
	ListInstances bool
	// ListApps, ListClusters and ListResources are EMCO's list queries
	// (?apps, ?clusters, ?resources), in that precedence.
	ListApps, ListClusters, ListResources bool
	// typeGiven records an explicit type or status (a logical cloud's
	// status defaults to ready, as in EMCO).
	typeGiven bool
}

// Query string bounds: a filter is a list a person writes, not a way to
// make every status answer loop over a megabyte of names.
const (
	MaxFilterValues = 256
	maxFilterValue  = 512
)

// ParseQuery reads the query parameters; an unknown value is an ErrInvalid
// error naming the allowed ones.
func ParseQuery(v url.Values) (Query, error) {
	q := Query{Type: TypeRsync, Output: OutputAll}
	for _, name := range []string{"type", "status", "output", "app", "cluster", "resource", "instance", "sync"} {
		if len(v[name]) > MaxFilterValues {
			return q, errdefs.Invalid("%s has %d values; at most %d are allowed", name, len(v[name]), MaxFilterValues)
		}
		for _, val := range v[name] {
			if len(val) > maxFilterValue {
				return q, errdefs.Invalid("a %s value is longer than %d bytes", name, maxFilterValue)
			}
		}
	}
	for _, t := range v["type"] {
		switch t {
		case TypeRsync, TypeCluster:
			q.Type = t
		default:
			return q, errdefs.Invalid("type %q is not one of rsync, cluster", t)
		}
	}
	for _, s := range v["status"] { // EMCO's older spelling
		switch s {
		case "deployed":
			q.Type = TypeRsync
		case "ready":
			q.Type = TypeCluster
		default:
			return q, errdefs.Invalid("status %q is not one of deployed, ready", s)
		}
	}
	for _, o := range v["output"] {
		switch o {
		case OutputSummary, OutputAll, OutputDetail:
			q.Output = o
		default:
			return q, errdefs.Invalid("output %q is not one of summary, all, detail", o)
		}
	}
	q.Apps = nonEmpty(v["app"])
	for _, c := range nonEmpty(v["cluster"]) {
		// "+" arrives decoded as a space unless the client sent %2B.
		ref, err := appcontext.ParseClusterRef(strings.Replace(c, " ", "+", 1))
		if err != nil {
			return q, errdefs.Invalid("cluster %q: want <provider>+<cluster>", c)
		}
		q.Clusters = append(q.Clusters, ref)
	}
	q.Resources = nonEmpty(v["resource"])
	for _, st := range nonEmpty(v["sync"]) {
		if !syncstate.Valid(st) {
			return q, errdefs.Invalid("sync %q is not one of %s", st, strings.Join(syncstate.States, ", "))
		}
		q.Sync = append(q.Sync, st)
	}
	_, q.ListApps = v["apps"]
	_, q.ListClusters = v["clusters"]
	_, q.ListResources = v["resources"]
	q.typeGiven = len(v["type"])+len(v["status"]) > 0
	if inst, ok := v["instance"]; ok {
		if len(inst) == 0 || inst[0] == "" {
			q.ListInstances = true
		} else if _, err := strconv.ParseUint(inst[0], 10, 64); err != nil {
			return q, errdefs.Invalid("instance %q is not a context id (a decimal number)", inst[0])
		} else {
			q.Instance = inst[0]
		}
	}
	return q, nil
}

func nonEmpty(l []string) []string {
	var out []string
	for _, s := range l {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// Matches reports whether a resource passes the query's app, cluster and
// resource filters, as a status answer would list it.
func (q Query) Matches(app string, cluster appcontext.ClusterRef, kind, name string) bool {
	return match(q.Apps, app) && matchCluster(q.Clusters, cluster) && matchResource(q.Resources, kind, name)
}

// Filtered reports whether any of the app, cluster, resource and sync
// filters is set.
func (q Query) Filtered() bool { return len(q.Apps)+len(q.Clusters)+len(q.Resources)+len(q.Sync) > 0 }
