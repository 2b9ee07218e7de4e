package hub

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/argus-mc/argus/src/internal/appcontext"
	"github.com/argus-mc/argus/src/internal/errdefs"
	"github.com/argus-mc/argus/src/internal/etcdwatch"
	"github.com/argus-mc/argus/src/internal/rsync"
)

var _ rsync.Delegate = (*Hub)(nil)

// maxWorkRecord bounds one placement's work record (its manifests are
// stored apart, by hash): about 4,000 resources.
const maxWorkRecord = 1 << 20

// Publish records a placement, or its deletion, as its cluster's work
// (rsync.Delegate). The record's revision is the work's generation; an
// unchanged record keeps its generation. It writes through the hub's
// writer, so it waits for Run (rsync runs under the same context).
func (h *Hub) Publish(ctx context.Context, c *appcontext.Context, p *appcontext.Placement, kind rsync.WorkKind) (int64, error) {
	rec := workRecord{Context: c.Meta.ID, App: p.App, StatusID: c.Meta.StatusID, Namespace: c.Meta.Namespace,
		FieldValidation: c.Meta.FieldValidation, Delete: kind == rsync.WorkDelete, Update: kind == rsync.WorkUpdate,
		Group: c.Meta.Group, Adopt: c.Meta.SyncPolicy.Adopt,
		Resources: make([]workResource, 0, len(p.Resources))}
	for _, r := range p.Resources {
		wr := workResource{Group: r.GVK.Group, Version: r.GVK.Version, Kind: r.GVK.Kind, Name: r.Name, Namespace: r.Namespace, Removed: r.Removed,
			Hook: r.Hook}
		if r.ManifestRef == nil {
			return 0, errdefs.Invalid("resource %s of %s has no stored manifest", r.Key(), p.App)
		}
		wr.SHA256, wr.Size = r.ManifestRef.SHA256, int64(r.ManifestRef.Size)
		rec.Resources = append(rec.Resources, wr)
	}
	data, err := json.Marshal(rec)
	if err != nil {
		return 0, err
	}
	if len(data) > maxWorkRecord {
		return 0, errdefs.TooLarge("the work of app %s on %s is %d bytes, more than %d", p.App, p.Cluster, len(data), maxWorkRecord)
	}
	key := h.keys.work(p.Cluster, c.Meta.ID, p.App)
	// An install is written at once, on the guess that there is no record
	// yet (one read per placement was a tenth of the owner's work while
	// instantiating on 10,000 clusters); the guard refuses it when there is
	// one — a replica taking over an instantiation — and the record is
	// read and compared as for an update.
	guess := kind == rsync.WorkInstall
	attempts := 3 // writes over a record read and compared
	if guess {
		attempts++
	}
	for attempt := 1; ; attempt++ {
		var was int64 // 0: no record
		if !guess || attempt > 1 {
			resp, err := h.opts.Client.Get(ctx, key)
			if err != nil {
				return 0, fmt.Errorf("read the work of %s on %s: %w", p.App, p.Cluster, err)
			}
			if len(resp.Kvs) > 0 {
				if sameWork(resp.Kvs[0].Value, rec) {
					return resp.Kvs[0].ModRevision, nil
				}
				was = resp.Kvs[0].ModRevision
			}
		}
		// Batched with other placements' work and the agents' reports;
		// written only over the record just compared (or, guessing, over
		// none).
		gen, err := h.writer.put(ctx, key, clientv3.Compare(clientv3.ModRevision(key), "=", was), clientv3.OpPut(key, string(data)), len(key)+len(data))
		if errors.Is(err, errSuperseded) {
			if attempt < attempts {
				continue // written meanwhile (or before, against the guess): compare with that
			}
			return 0, fmt.Errorf("publish the work of %s on %s: it changed each of %d times it was written", p.App, p.Cluster, attempt)
		}
		if err != nil {
			return 0, fmt.Errorf("publish the work of %s on %s: %w", p.App, p.Cluster, err)
		}
		return gen, nil
	}
}

// sameWork reports whether a stored record asks what rec asks. An update
// that leaves a placement as it was changes nothing for its agent (the
// Update flag alone would only make every unchanged placement of the DIG
// travel again): it keeps its generation.
func sameWork(stored []byte, rec workRecord) bool {
	var old workRecord
	if json.Unmarshal(stored, &old) != nil {
		return false
	}
	old.Update = rec.Update
	a, errA := json.Marshal(old)
	b, errB := json.Marshal(rec)
	return errA == nil && errB == nil && bytes.Equal(a, b)
}

// Forget deletes a placement's work and progress: its agent forgets it,
// leaving the cluster as it is (rsync.Delegate).
func (h *Hub) Forget(ctx context.Context, id, app string, ref appcontext.ClusterRef) error {
	_, err := h.opts.Client.Txn(ctx).Then(clientv3.OpDelete(h.keys.work(ref, id, app)), clientv3.OpDelete(h.keys.report(ref, id, app))).Commit()
	if err != nil {
		return fmt.Errorf("forget the work of %s on %s: %w", app, ref, err)
	}
	return nil
}

// WaitObserved returns once the context cache reflects rev
// (rsync.Delegate).
func (h *Hub) WaitObserved(ctx context.Context, rev int64) error {
	return h.opts.Observed.WaitRevision(ctx, rev)
}

// progressRecordRev is a progress record with the revision it was stored at.
type progressRecordRev struct {
	progressRecord
	rev int64
}

// Follow returns the agent's progress on a placement, the current progress
// first (rsync.Delegate). Every replica follows the progress records with
// one watch.
func (h *Hub) Follow(id, app string, ref appcontext.ClusterRef) (<-chan rsync.Progress, func()) {
	k := placementKey{ref: ref, id: id, app: app}
	in := make(chan progressRecordRev, 1)
	out := make(chan rsync.Progress)
	h.mu.Lock()
	h.nextID++
	fid := h.nextID
	if h.followers[k] == nil {
		h.followers[k] = map[uint64]chan progressRecordRev{}
	}
	h.followers[k][fid] = in
	h.mu.Unlock()
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		// The current record, read after registering: nothing in between
		// is missed, and a record seen twice is harmless.
		if resp, err := h.opts.Client.Get(ctx, h.keys.report(ref, id, app)); err == nil && len(resp.Kvs) > 0 {
			var pr progressRecord
			if json.Unmarshal(resp.Kvs[0].Value, &pr) == nil {
				deliverLatest(in, progressRecordRev{pr, resp.Kvs[0].ModRevision})
			}
		}
		for {
			select {
			case <-ctx.Done():
				return
			case pr := <-in:
				select {
				case out <- rsync.Progress{Generation: pr.Generation, Quiet: pr.Quiet, Settled: pr.Settled, Revision: pr.rev}:
				case <-ctx.Done():
					return
				}
			}
		}
	}()
	return out, func() {
		h.mu.Lock()
		delete(h.followers[k], fid)
		if len(h.followers[k]) == 0 {
			delete(h.followers, k)
		}
		h.mu.Unlock()
		cancel()
		<-stopped
	}
}

// deliverLatest puts v into a one-slot channel, replacing what waits there:
// only the latest progress matters.
func deliverLatest(ch chan progressRecordRev, v progressRecordRev) {
	for {
		select {
		case ch <- v:
			return
		default:
		}
		select {
		case <-ch:
		default:
		}
	}
}

// progressEvent hands a progress record to whoever follows its placement.
func (h *Hub) progressEvent(ev etcdwatch.Event) {
	if ev.Deleted {
		return
	}
	k, ok := parsePlacement(strings.TrimPrefix(ev.Key, h.keys.reportsPrefix()))
	if !ok {
		return
	}
	var pr progressRecord
	if json.Unmarshal(ev.Value, &pr) != nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, ch := range h.followers[k] {
		deliverLatest(ch, progressRecordRev{pr, ev.ModRevision})
	}
}
