package status

import (
	"context"
	"encoding/json"
	"net/url"
	"strconv"

	"github.com/argus-mc/argus/src/internal/catalog"
	"github.com/argus-mc/argus/src/internal/health"
	"github.com/argus-mc/argus/src/internal/syncstate"
)

// Entries flattens a context's status into notification entries, one per
// resource (pods included), each carrying both the rsync and the cluster
// view, whatever q.Type says: a subscriber hears of any change that alters
// either. The filters of q (apps, clusters, resources) apply.
func Entries(in Input, q Query) []Entry {
	if in.Context == nil {
		return nil
	}
	return entriesOf(buildForEntries(in, q))
}

// buildForEntries is the answer entries are made of: the cluster view
// with details and the rsync status.
func buildForEntries(in Input, q Query) Response {
	q.Type, q.Output = TypeCluster, OutputDetail
	in.withRsync = true
	return Build(in, q)
}

func entriesOf(resp Response) []Entry {
	var out []Entry
	for _, a := range resp.Apps {
		for _, c := range a.Clusters {
			out = appendEntries(out, a.Name, c)
		}
	}
	return out
}

// appendEntries appends a cluster's entries, one per key: two resources
// of a chart can share one (a cluster-scoped object rendered with and
// without a namespace, both found under none), and the notifier diffs
// by key, so the first stands for both.
func appendEntries(out []Entry, app string, c Cluster) []Entry {
	seen := make(map[string]bool, len(c.Resources))
	for _, r := range c.Resources {
		e := entry(app, c, r)
		if !seen[e.Key] {
			seen[e.Key] = true
			out = append(out, e)
		}
	}
	return out
}

// entry is a resourcesStatus-shaped payload (k8splugin: the whole object
// under "status") plus the placement and both status views. Only the
// object's .status enters the digest: metadata churn is not a change.
func entry(app string, c Cluster, r Resource) Entry {
	key := ResourceKey{App: app, ClusterProvider: c.ClusterProvider, Cluster: c.Cluster,
		Group: r.GVK.Group, Version: r.GVK.Version, Kind: r.GVK.Kind, Namespace: r.Namespace, Name: r.Name}
	p := key.Payload()
	for k, v := range map[string]string{"rsync-status": r.RsyncStatus, "cluster-status": r.ClusterStatus,
		"ready-status": r.ReadyStatus, "reason": r.Reason, "syncStatus": r.SyncStatus, "syncReason": r.SyncReason,
		"adoptedFrom": r.AdoptedFrom} {
		if v != "" {
			p[k] = v
		}
	}
	heals := 0
	if r.Heal != nil {
		p["heal"], heals = r.Heal, r.Heal.Count
	}
	var objStatus json.RawMessage
	if len(r.Detail) > 0 {
		p["status"] = r.Detail
		var obj struct {
			Status json.RawMessage `json:"status"`
		}
		if json.Unmarshal(r.Detail, &obj) == nil {
			objStatus = obj.Status
		}
	}
	// A change of sync state, and each heal, is a change for subscribers
	// (a Synced resource never healed digests as it did before sync states
	// existed, so none seems modified after an upgrade).
	rsync := r.RsyncStatus
	if (r.SyncStatus != "" && r.SyncStatus != syncstate.Synced) || heals > 0 {
		rsync += "|" + r.SyncStatus + "|" + strconv.Itoa(heals)
	}
	return Entry{Key: key.String(), Payload: p, Digest: Digest(r.ReadyStatus, r.Reason, rsync, r.ClusterStatus, objStatus)}
}

// InstanceFeed is a v1 instance's entries and whether it is ready, as
// GET /v1/instance/{id}/status would say.
func (r *Reader) InstanceFeed(ctx context.Context, id string) ([]Entry, bool, error) {
	if _, err := catalog.For[catalog.InstanceSpec](r.Catalog, catalog.Instances).Get(ctx, catalog.Key{id}); err != nil {
		return nil, false, err
	}
	var entries []Entry
	ready := false
	err := r.withInput(ctx, Header{Name: id}, catalog.DIGState{}, id, func(in Input) {
		entries = Entries(in, Query{})
		ready = instanceReady(entries)
	})
	return entries, ready, err
}

func instanceReady(entries []Entry) bool {
	var statuses []health.Status
	for _, e := range entries {
		if rs, ok := e.Payload["ready-status"].(string); ok {
			statuses = append(statuses, health.Status(rs))
		}
	}
	return allReady(statuses)
}

// DIGFeed is a DIG's entries for a subscription's filters, in runs (one a
// placement when they come from the cache), and the status response those
// filters give.
func (r *Reader) DIGFeed(ctx context.Context, dig catalog.Key, v url.Values) (Runs, any, string, error) {
	q, err := ParseQuery(v)
	if err != nil {
		return nil, nil, "", err
	}
	header, st, err := r.digHeader(ctx, dig)
	if err != nil {
		return nil, nil, "", err
	}
	id, err := pickInstance(st, q, "deployment intent group")
	if err != nil {
		return nil, nil, "", err
	}
	var entries Runs
	var resp Response
	err = r.withInput(ctx, header, st, id, func(in Input) {
		if !in.cached || in.Context == nil {
			var flat []Entry
			if flat, resp = feed(in, q); len(flat) > 0 {
				entries = Runs{flat}
			}
			return
		}
		// From the cache: entries and a summary cost what changed since
		// the last notification; output=all and detail, the whole answer
		// a subscriber asked for, cost the DIG.
		entries = r.feeds.state(id, q, newEntriesState).entries(in, q)
		if q.Output == OutputSummary {
			in.summaries = r.summaries.state(id, q, newSummaryState(q.Type))
		}
		resp = Build(in, q)
	})
	return entries, resp, headDigest(resp), err
}

// feed is a DIG's entries and its answer to q. Entries need the cluster
// view with details; a type=cluster answer is that view less what q did
// not ask for, so the DIG's status is built once, not once for the
// entries and again for the answer (a large DIG's output=all is the
// costliest part of a notification). A type=rsync answer is a view of its
// own (no bundle lookups, the rendered manifests as details).
func feed(in Input, q Query) ([]Entry, Response) {
	if in.Context == nil || q.Type != TypeCluster {
		return Entries(in, q), Build(in, q)
	}
	resp := buildForEntries(in, q)
	entries := entriesOf(resp)
	if q.Output == OutputSummary {
		resp.Apps = nil
		return entries, resp
	}
	for i := range resp.Apps {
		for j := range resp.Apps[i].Clusters {
			rs := resp.Apps[i].Clusters[j].Resources
			for k := range rs {
				rs[k].RsyncStatus = "" // the entries' extra view (Cluster.strip)
				if q.Output != OutputDetail {
					rs[k].Detail = nil
				}
			}
		}
	}
	return entries, resp
}

// headDigest covers what a DIG's answer says beyond its resources: the
// lifecycle (the last action, the context's status) and overall readiness.
func headDigest(r Response) string {
	last := ""
	if n := len(r.State.Actions); n > 0 {
		a := r.State.Actions[n-1]
		last = a.State + "/" + a.ContextID
	}
	ready := ""
	if r.Ready != nil {
		ready = strconv.FormatBool(*r.Ready)
	}
	return Digest(ready, last, r.Status, "", nil)
}

// CheckQuery validates a subscription's filters as a status query would.
func CheckQuery(v url.Values) error {
	_, err := ParseQuery(v)
	return err
}
