package agent

import (
	"crypto/sha256"
	"encoding/hex"
	"sort"
	"sync"

	"k8s.io/apimachinery/pkg/runtime/schema"

	pb "github.com/argus-mc/argus/src/apis/fleet"
	"github.com/argus-mc/argus/src/internal/appcontext"
)

// workState is the agent's copy of its cluster's work: the latest item of
// each placement handed to the cluster, the items waiting for manifests,
// the manifests they refer to, and the revision taken in.
// Items whose manifests are not all here yet wait for them; a batch's
// revision counts as taken in once none of its items waits.
type workState struct {
	mu       sync.Mutex
	revision int64 // every batch up to it is handed to the cluster
	items    map[WorkKey]*pb.WorkItem
	blobs    map[string][]byte
	waiting  map[WorkKey]*pb.WorkItem
	asked    map[string]bool // hashes requested and not arrived
	pending  int64           // the revision to take in once nothing waits
}

func newWorkState() *workState {
	return &workState{items: map[WorkKey]*pb.WorkItem{}, blobs: map[string][]byte{}, waiting: map[WorkKey]*pb.WorkItem{},
		asked: map[string]bool{}}
}

// outcome is what a batch or blobs answer leads to.
type outcome struct {
	apply  []Work
	forget []WorkKey
	ask    []*pb.BlobRequest
	ack    int64 // a revision to acknowledge; 0 for none
}

// Revision is the revision to name when connecting.
func (s *workState) Revision() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.revision
}

// reconnected drops what was asked on a stream that ended: it is asked
// again, and waiting items come again with the catch-up.
func (s *workState) reconnected() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.asked, s.waiting, s.pending = map[string]bool{}, map[WorkKey]*pb.WorkItem{}, 0
}

func keyOf(w *pb.WorkItem) WorkKey { return WorkKey{Context: w.GetContextId(), App: w.GetApp()} }

// batch takes in a work batch.
func (s *workState) batch(b *pb.WorkBatch) outcome {
	s.mu.Lock()
	defer s.mu.Unlock()
	var o outcome
	if b.GetComplete() {
		keep := map[WorkKey]bool{}
		for _, k := range b.GetKeys() {
			keep[WorkKey{Context: k.GetContextId(), App: k.GetApp()}] = true
		}
		for k := range s.items {
			if !keep[k] {
				o.forget = append(o.forget, k)
			}
		}
		for k := range s.waiting {
			if !keep[k] && s.items[k] == nil {
				delete(s.waiting, k)
			}
		}
	}
	for _, k := range b.GetRemoved() {
		o.forget = append(o.forget, WorkKey{Context: k.GetContextId(), App: k.GetApp()})
	}
	for _, k := range o.forget {
		delete(s.items, k)
		delete(s.waiting, k)
	}
	missing := map[string]map[string]bool{} // context → hashes
	for _, it := range b.GetItems() {
		k := keyOf(it)
		if old := s.items[k]; old != nil && old.GetGeneration() >= it.GetGeneration() {
			continue // already have it (a catch-up after a reconnect)
		}
		if w, ok := s.resolve(it, missing); ok {
			delete(s.waiting, k)
			s.items[k] = it
			o.apply = append(o.apply, w)
		} else {
			s.waiting[k] = it
		}
	}
	o.ask = requests(missing)
	if b.GetRevision() > 0 {
		s.pending = max(s.pending, b.GetRevision())
	}
	o.ack = s.settleLocked()
	s.pruneLocked()
	return o
}

// blobs takes in manifests; it verifies each against its hash.
func (s *workState) blobsArrived(bl *pb.Blobs) outcome {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, b := range bl.GetBlobs() {
		delete(s.asked, b.GetSha256())
		sum := sha256.Sum256(b.GetData())
		if len(b.GetData()) > 0 && hex.EncodeToString(sum[:]) == b.GetSha256() {
			s.blobs[b.GetSha256()] = b.GetData()
		}
	}
	var o outcome
	missing := map[string]map[string]bool{}
	keys := make([]WorkKey, 0, len(s.waiting))
	for k := range s.waiting {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i].Context+"/"+keys[i].App < keys[j].Context+"/"+keys[j].App })
	for _, k := range keys {
		it := s.waiting[k]
		if w, ok := s.resolve(it, missing); ok {
			delete(s.waiting, k)
			s.items[k] = it
			o.apply = append(o.apply, w)
		}
	}
	// A manifest the hub no longer has (its context went meanwhile): the
	// item stops waiting; the work's next change replaces or removes it.
	for _, k := range keys {
		if it := s.waiting[k]; it != nil && !s.askedAny(it) {
			delete(s.waiting, k)
		}
	}
	o.ask = requests(missing)
	o.ack = s.settleLocked()
	return o
}

func (s *workState) askedAny(it *pb.WorkItem) bool {
	for _, r := range it.GetResources() {
		if s.asked[r.GetSha256()] {
			return true
		}
	}
	return false
}

// resolve builds the Work of an item whose manifests are all here, or
// notes (in missing) those to ask for.
func (s *workState) resolve(it *pb.WorkItem, missing map[string]map[string]bool) (Work, bool) {
	w := Work{Key: keyOf(it), Generation: it.GetGeneration(), StatusID: it.GetStatusId(), Namespace: it.GetNamespace(),
		FieldValidation: it.GetFieldValidation(), Delete: it.GetDelete(), Update: it.GetUpdate(), Group: it.GetGroup(), Adopt: it.GetAdopt()}
	ok := true
	for _, r := range it.GetResources() {
		data, have := s.blobs[r.GetSha256()]
		if !have {
			ok = false
			if !s.asked[r.GetSha256()] {
				if missing[it.GetContextId()] == nil {
					missing[it.GetContextId()] = map[string]bool{}
				}
				missing[it.GetContextId()][r.GetSha256()] = true
				s.asked[r.GetSha256()] = true
			}
			continue
		}
		res := Resource{GVK: schema.GroupVersionKind{Group: r.GetGroup(), Version: r.GetVersion(), Kind: r.GetKind()},
			Name: r.GetName(), Namespace: r.GetNamespace(), Removed: r.GetRemoved(), SHA256: r.GetSha256(), Manifest: data}
		if h := r.GetHook(); h != nil {
			res.Hook = &appcontext.Hook{Events: h.GetEvents(), Weight: int(h.GetWeight()), DeletePolicies: h.GetDeletePolicies()}
		}
		w.Resources = append(w.Resources, res)
	}
	return w, ok
}

// settleLocked returns the pending revision once nothing waits.
func (s *workState) settleLocked() int64 {
	if s.pending == 0 || len(s.waiting) > 0 {
		return 0
	}
	s.revision, s.pending = s.pending, 0
	return s.revision
}

// pruneLocked drops manifests no item refers to any more.
func (s *workState) pruneLocked() {
	used := map[string]bool{}
	for _, it := range s.waiting {
		for _, r := range it.GetResources() {
			used[r.GetSha256()] = true
		}
	}
	for _, it := range s.items {
		for _, r := range it.GetResources() {
			used[r.GetSha256()] = true
		}
	}
	for sum := range s.blobs {
		if !used[sum] {
			delete(s.blobs, sum)
		}
	}
}

func requests(missing map[string]map[string]bool) []*pb.BlobRequest {
	var out []*pb.BlobRequest
	for id, sums := range missing {
		req := &pb.BlobRequest{ContextId: id}
		for sum := range sums {
			req.Sha256 = append(req.Sha256, sum)
		}
		sort.Strings(req.Sha256)
		out = append(out, req)
	}
	return out
}
