package rsync

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/sirupsen/logrus"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/argus-mc/argus/src/internal/appcontext"
	"github.com/argus-mc/argus/src/internal/backoff"
	"github.com/argus-mc/argus/src/internal/logging"
	"github.com/argus-mc/argus/src/internal/ownership"
)

// Claims says which groups this process runs the actions of; with several
// replicas each group is claimed by exactly one (ownership.Kind).
type Claims interface {
	// Want says the group exists and needs an owner; it never blocks.
	Want(group string)
	// Drop is never called: a group outlives its actions.
	Drop(group string)
}

// DispatcherOptions configures a Dispatcher; Engine and Claims are required.
type DispatcherOptions struct {
	Engine *Engine
	Claims Claims
	// Lease is the lease this replica's progress reports are written on, so
	// they vanish with it; nil or 0 writes them without one.
	Lease func() clientv3.LeaseID
	// StopWait bounds how long Stop waits for the owner to stop an action
	// (a dead owner's successor needs up to the lease TTL); 0 means 60s.
	StopWait time.Duration
	Logger   *logrus.Entry
}

// Dispatcher decides which process runs a group's actions, so any replica
// may take an API call for any group. Instantiate, Update and Terminate
// record the action in etcd as an owned record (ownership.Records); the
// replica that owns the group follows those records and runs them on its
// Engine. A record lives until its action ends, so a replica that takes a
// group over resumes every unfinished action simply by running the
// group's records. Stop marks records stopped and waits until the owner
// reports them halted; Busy and Idle read the records and the owner's
// progress reports (the records' acknowledgements).
//
// Layout, under the store's prefix:
//
//	/rsync/actions/<group>/<context id>   {"action", "stop", "requested"}
//	/rsync/progress/<group>/<context id>  {"rev", "quiet", "halted"}, on the owner's lease
//
// It implements the deploy package's Rsync interface.
type Dispatcher struct {
	opts DispatcherOptions
	log  *logrus.Entry
	recs *ownership.Records[actionRecord, progressReport]

	mu      sync.Mutex
	groups  map[string]*ownedGroup // groups this process owns now
	closing bool
	wg      sync.WaitGroup
	// writes are the owner's etcd writes (progress reports, removals of
	// finished records), done one at a time in the order decided.
	writes  []func(context.Context)
	writing bool
}

// ownedGroup is a group's runs on its owner, by context id.
type ownedGroup struct {
	runs map[string]*tracked
}

// tracked is one run answering one record.
type tracked struct {
	r       *run
	rev     int64 // the record's mod revision it answers
	stopRev int64 // the stop mark's revision, once one came
	quiet   bool
}

// actionRecord is an action requested for one context.
type actionRecord struct {
	Action    string    `json:"action"`
	Stop      bool      `json:"stop,omitempty"`
	Requested time.Time `json:"requested"`
}

// progressReport is the owner's answer to a record.
type progressReport struct {
	Rev    int64 `json:"rev"`
	Quiet  bool  `json:"quiet,omitempty"`
	Halted bool  `json:"halted,omitempty"`
}

// record is an action record with its key's revisions.
type record = ownership.Record[actionRecord]

// groupState is a group's records and the owner's reports on them.
type groupState = ownership.State[actionRecord, progressReport]

// NewDispatcher returns a Dispatcher; Run follows the records.
func NewDispatcher(opts DispatcherOptions) (*Dispatcher, error) {
	if opts.Engine == nil || opts.Claims == nil {
		return nil, errors.New("rsync: Engine and Claims are required")
	}
	if opts.StopWait == 0 {
		opts.StopWait = time.Minute
	}
	if opts.Logger == nil {
		opts.Logger = logrus.NewEntry(logging.Discard())
	}
	store := opts.Engine.opts.Store
	d := &Dispatcher{opts: opts, log: opts.Logger, groups: map[string]*ownedGroup{}}
	var err error
	d.recs, err = ownership.NewRecords[actionRecord, progressReport](ownership.RecordsOptions[actionRecord]{
		Client: store.Client(), Prefix: store.Prefix() + "/rsync/actions/", AckPrefix: store.Prefix() + "/rsync/progress/",
		Layout: ownership.Many, Claims: opts.Claims, Owner: dispatchOwner{d}, Lease: opts.Lease,
		Retry: backoff.Backoff{Base: time.Second, Max: time.Second}, Name: "rsync actions", Logger: opts.Logger})
	if err != nil {
		return nil, err
	}
	return d, nil
}

// dispatchOwner hands the records of owned groups to the Dispatcher.
type dispatchOwner struct{ d *Dispatcher }

func (o dispatchOwner) Changed(r record) { o.d.handle(r) }

// recordKey is a record's key: "<group>/<id>"; ids never hold a '/',
// groups may.
func recordKey(group, id string) string { return group + "/" + id }

// contextID is the context id of a record's key.
func contextID(key string) string { return key[strings.LastIndexByte(key, '/')+1:] }

// Instantiate asks the group's owner to apply a new context's resources.
func (d *Dispatcher) Instantiate(group, id string) { d.request(group, id, actionApply) }

// Update asks the group's owner to apply a context's changes.
func (d *Dispatcher) Update(group, id string) { d.request(group, id, actionUpdate) }

// Terminate asks the group's owner to cancel the actions in flight and
// delete the context's resources.
func (d *Dispatcher) Terminate(group, id string) { d.request(group, id, actionDelete) }

// request records an action, retrying for a while: callers have no error
// to return (the action is asynchronous), and a context left without its
// record would wait for the next start-up (Resume) to be acted on.
func (d *Dispatcher) request(group, id, kind string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	retry := backoff.Backoff{Base: 200 * time.Millisecond, Step: 200 * time.Millisecond, Max: 2 * time.Second}
	for {
		_, err := d.recs.Put(ctx, recordKey(group, id), actionRecord{Action: kind, Requested: time.Now().UTC()})
		if err == nil {
			break
		}
		if !retry.Wait(ctx) {
			d.log.WithError(err).WithFields(logrus.Fields{"group": group, "context": id, "action": kind}).
				Error("cannot record an rsync action; it is taken up at the next start-up")
			return
		}
	}
	d.opts.Claims.Want(group)
}

// Busy reports whether an action on the group is requested or running. If
// etcd cannot tell, it answers true: callers refuse changes to a busy
// group, the safe side.
func (d *Dispatcher) Busy(group string) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := d.recs.ReadItem(ctx, group)
	if err != nil {
		d.log.WithError(err).WithField("group", group).Warn("cannot tell whether rsync is busy; assuming it is")
		return true
	}
	for _, r := range st.Records {
		if !r.Value.Stop {
			return true
		}
	}
	return false
}

// Stop cancels the actions in flight on the group — the latest and any
// other that is not the deletion of an earlier context —
// and waits until the group's owner reports them halted; it reports
// whether any was in flight.
func (d *Dispatcher) Stop(group string) bool {
	ctx, cancel := context.WithTimeout(context.Background(), d.opts.StopWait)
	defer cancel()
	targets, markRev, err := d.markStopped(ctx, group)
	if err != nil {
		d.log.WithError(err).WithField("group", group).Error("cannot stop rsync")
		return false
	}
	if len(targets) == 0 {
		return false
	}
	d.opts.Claims.Want(group)
	if err := d.waitHalted(ctx, group, targets, markRev); err != nil {
		d.log.WithError(err).WithField("group", group).Warn("the group's owner did not report its actions stopped in time")
	}
	// The stopped records go: what stopped them now sets the context's
	// status, and a later request replaces them anyway.
	for _, t := range targets {
		if err := d.recs.Remove(context.WithoutCancel(ctx), t.Key, markRev); err != nil {
			d.log.WithError(err).WithField("group", group).Warn("cannot remove a stopped rsync action record")
		}
	}
	return true
}

// markStopped marks the records Stop cancels stopped, all at once, and
// returns them and the mark's revision; none when nothing is in flight.
func (d *Dispatcher) markStopped(ctx context.Context, group string) ([]record, int64, error) {
	for {
		st, err := d.recs.ReadItem(ctx, group)
		if err != nil {
			return nil, 0, err
		}
		var live []record
		for _, r := range st.Records {
			if !r.Value.Stop {
				live = append(live, r)
			}
		}
		if len(live) == 0 {
			return nil, 0, nil
		}
		latest := live[len(live)-1]
		var targets []record
		for _, r := range live {
			if r.Value.Action != actionDelete || r.Key == latest.Key {
				r.Value.Stop = true
				targets = append(targets, r)
			}
		}
		ok, rev, err := d.recs.Replace(ctx, targets)
		if err != nil || ok {
			return targets, rev, err
		}
		// A record changed meanwhile: look again.
	}
}

// waitHalted waits until every target's record was answered as halted (or
// is gone, or was replaced by a newer request).
func (d *Dispatcher) waitHalted(ctx context.Context, group string, targets []record, markRev int64) error {
	return d.recs.WaitItem(ctx, group, func(st groupState) bool {
		byKey := map[string]record{}
		for _, r := range st.Records {
			byKey[r.Key] = r
		}
		for _, t := range targets {
			r, ok := byKey[t.Key]
			if !ok || r.ModRevision != markRev {
				continue // finished and removed, or superseded
			}
			p, ok := st.Acks[t.Key]
			if !ok || !p.Value.Halted || p.Value.Rev != markRev {
				return false
			}
		}
		return true
	})
}

// Idle waits until no action on the group is at work: none is requested,
// or each has tried every resource once and only waits for the world (a
// CRD to be installed, a cluster to answer: what an update supersedes); or
// ctx ends.
func (d *Dispatcher) Idle(ctx context.Context, group string) error {
	return d.recs.WaitItem(ctx, group, func(st groupState) bool {
		for _, r := range st.Records {
			if r.Value.Stop {
				continue
			}
			p, ok := st.Acks[r.Key]
			if !ok || !p.Value.Quiet || p.Value.Rev != r.ModRevision {
				return false
			}
		}
		return true
	})
}

// Run resumes actions an earlier process left without a record, then
// follows the records of every group, running those of the groups this
// process owns, until ctx ends.
func (d *Dispatcher) Run(ctx context.Context) error {
	defer func() {
		d.mu.Lock()
		d.closing = true
		d.mu.Unlock()
		d.wg.Wait()
	}()
	if err := d.resume(ctx); err != nil {
		return err
	}
	return d.recs.Run(ctx)
}

// resume gives every context an earlier process left in an action's
// status (Instantiating, Updating, Terminating, or failed while rsync was
// still at work) without a record one, so its owner continues it: an
// orchestrator upgraded from a release without records, or one killed
// between recording a context and its action.
func (d *Dispatcher) resume(ctx context.Context) error {
	list, err := d.opts.Engine.opts.Store.List(ctx)
	if err != nil {
		return fmt.Errorf("rsync: resume: %w", err)
	}
	keys, err := d.recs.Keys(ctx)
	if err != nil {
		return fmt.Errorf("rsync: resume: %w", err)
	}
	have := map[string]bool{}
	for key := range keys {
		have[contextID(key)] = true
	}
	for _, c := range list { // oldest first: a group's deletion before its next instantiation
		kind := resumeAction(c.Status)
		if kind == "" || have[c.Meta.ID] || c.Meta.Group == "" {
			continue
		}
		if _, err := d.recs.Create(ctx, recordKey(c.Meta.Group, c.Meta.ID), actionRecord{Action: kind, Requested: time.Now().UTC()}); err != nil {
			return fmt.Errorf("rsync: resume: %w", err)
		}
		d.log.WithFields(logrus.Fields{"context": c.Meta.ID, "status": c.Status.Status}).Info("resuming rsync action")
	}
	return nil
}

// Acquired takes a group over: its records are run in the order they were
// requested. Stopped ones are reported halted.
func (d *Dispatcher) Acquired(group string) {
	d.mu.Lock()
	if d.groups[group] == nil {
		d.groups[group] = &ownedGroup{runs: map[string]*tracked{}}
	}
	d.mu.Unlock()
	d.recs.Acquired(group)
}

// Released gives a group up: its runs are cancelled (their records stay
// for the next owner) and it returns once they stopped.
func (d *Dispatcher) Released(group string) {
	d.recs.Released(group)
	d.mu.Lock()
	delete(d.groups, group)
	d.mu.Unlock()
	d.opts.Engine.Release(group)
}

// handle acts on one record of an owned group (each revision once, see
// ownership.Records): runs it, or stops its run.
func (d *Dispatcher) handle(r record) {
	d.mu.Lock()
	defer d.mu.Unlock()
	group, id := r.Item, contextID(r.Key)
	g := d.groups[group]
	if g == nil || d.closing || r.Deleted {
		return
	}
	t := g.runs[id]
	if r.Value.Stop {
		if t != nil && !closed(t.r.done) {
			t.stopRev = r.ModRevision
			t.r.cancel() // its follower reports it halted once it stopped
			return
		}
		d.reportLocked(group, id, progressReport{Rev: r.ModRevision, Halted: true})
		return
	}
	kind := r.Value.Action
	if kind != actionApply && kind != actionUpdate && kind != actionDelete && kind != actionSync {
		d.log.WithFields(logrus.Fields{"group": group, "context": id, "action": kind}).Warn("skipping an unknown rsync action")
		return
	}
	run := d.opts.Engine.start(group, kind, id, kind == actionDelete)
	if t != nil && t.r == run { // the same action asked for again
		t.rev = r.ModRevision
		if t.quiet {
			d.reportLocked(group, id, progressReport{Rev: t.rev, Quiet: true})
		}
		return
	}
	t = &tracked{r: run, rev: r.ModRevision}
	g.runs[id] = t
	d.wg.Add(1)
	go d.followRun(group, id, t)
}

// followRun reports a run quiet, and once it ended removes its record (it
// is done) or reports it halted (it was stopped). A run ended by a
// handover or shutdown leaves its record for the next owner.
func (d *Dispatcher) followRun(group, id string, t *tracked) {
	defer d.wg.Done()
	select {
	case <-t.r.quiet:
		d.mu.Lock()
		if d.current(group, id, t) {
			t.quiet = true
			d.reportLocked(group, id, progressReport{Rev: t.rev, Quiet: true})
		}
		d.mu.Unlock()
	case <-t.r.done:
	}
	<-t.r.done
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.current(group, id, t) {
		return
	}
	delete(d.groups[group].runs, id)
	if t.stopRev != 0 {
		d.reportLocked(group, id, progressReport{Rev: t.stopRev, Halted: true})
		return
	}
	key, rev := recordKey(group, id), t.rev
	d.writeLocked(func(ctx context.Context) {
		// Only the request this run answered: a newer one (or a stop mark)
		// changed the revision and is handled on its own.
		if err := d.recs.Remove(ctx, key, rev); err != nil {
			d.log.WithError(err).WithFields(logrus.Fields{"group": group, "context": id}).Warn("cannot remove a finished rsync action record")
		}
	})
}

// current reports whether t is still the group's run of id on this owner.
func (d *Dispatcher) current(group, id string, t *tracked) bool {
	g := d.groups[group]
	return g != nil && !d.closing && g.runs[id] == t
}

// reportLocked writes a progress report on this replica's lease.
func (d *Dispatcher) reportLocked(group, id string, p progressReport) {
	key := recordKey(group, id)
	d.writeLocked(func(ctx context.Context) {
		if err := d.recs.Ack(ctx, key, p); err != nil {
			d.log.WithError(err).WithFields(logrus.Fields{"group": group, "context": id}).Warn("cannot report rsync progress")
		}
	})
}

// writeLocked queues an etcd write; one goroutine does them in order, so a
// run's "halted" never lands before its "quiet".
func (d *Dispatcher) writeLocked(w func(context.Context)) {
	d.writes = append(d.writes, w)
	if d.writing {
		return
	}
	d.writing = true
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		for {
			d.mu.Lock()
			if len(d.writes) == 0 {
				d.writing = false
				d.mu.Unlock()
				return
			}
			next := d.writes[0]
			d.writes = d.writes[1:]
			d.mu.Unlock()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			next(ctx)
			cancel()
		}
	}()
}

// resumeAction is the action that continues a context left in st, or "".
func resumeAction(st appcontext.Status) string {
	switch {
	case st.Status == appcontext.Instantiating, st.Status == appcontext.InstantiateFailed && st.Active:
		return actionApply
	case st.Status == appcontext.Updating, st.Status == appcontext.UpdateFailed && st.Active:
		return actionUpdate
	case st.Status == appcontext.Terminating:
		return actionDelete
	}
	return ""
}

// Release cancels every action of the group, deletions of earlier
// contexts too, and returns once they all settled: the group now belongs
// to another process, which continues them from etcd.
func (e *Engine) Release(group string) {
	e.mu.Lock()
	r := e.groups[group]
	for p := r; p != nil; p = p.prev {
		p.cancel()
	}
	e.mu.Unlock()
	if r == nil {
		return
	}
	<-r.settled
	e.mu.Lock()
	if e.groups[group] == r {
		delete(e.groups, group)
	}
	e.mu.Unlock()
}
