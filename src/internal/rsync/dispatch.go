package rsync

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/sirupsen/logrus"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/argus-mc/argus/src/internal/appcontext"
	"github.com/argus-mc/argus/src/internal/backoff"
	"github.com/argus-mc/argus/src/internal/logging"
)

// Claims says which groups this process runs the actions of; with several
// replicas each group is claimed by exactly one (ownership.Kind).
type Claims interface {
	// Want says the group exists and needs an owner; it never blocks.
	Want(group string)
	Owns(group string) bool
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
// record the action in etcd; the replica that owns the group (Claims)
// follows those records with a watch and runs them on its Engine. A record
// lives until its action ends, so a replica that takes a group over
// resumes every unfinished action simply by running the group's records.
// Stop marks records stopped and waits until the owner reports them
// halted; Busy and Idle read the records and the owner's progress reports.
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
	cli  *clientv3.Client
	pre  string // prefix of the records and progress reports

	mu      sync.Mutex
	groups  map[string]*ownedGroup // groups this process owns now
	seen    map[string]int64       // record key → newest revision handled
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

// NewDispatcher returns a Dispatcher; Run follows the records.
func NewDispatcher(opts DispatcherOptions) (*Dispatcher, error) {
	if opts.Engine == nil || opts.Claims == nil || opts.Engine.opts.Store == nil {
		return nil, errors.New("rsync: Engine (on a Store) and Claims are required")
	}
	if opts.StopWait == 0 {
		opts.StopWait = time.Minute
	}
	if opts.Lease == nil {
		opts.Lease = func() clientv3.LeaseID { return 0 }
	}
	if opts.Logger == nil {
		opts.Logger = logrus.NewEntry(logging.Discard())
	}
	store := opts.Engine.opts.Store
	return &Dispatcher{opts: opts, log: opts.Logger, cli: store.Client(), pre: store.Prefix() + "/rsync/",
		groups: map[string]*ownedGroup{}, seen: map[string]int64{}}, nil
}

func (d *Dispatcher) actionsPrefix() string  { return d.pre + "actions/" }
func (d *Dispatcher) progressPrefix() string { return d.pre + "progress/" }

func (d *Dispatcher) recordKey(group, id string) string { return d.actionsPrefix() + group + "/" + id }
func (d *Dispatcher) progressKey(group, id string) string {
	return d.progressPrefix() + group + "/" + id
}

// split parses "<group>/<id>"; ids never hold a '/', groups may.
func split(rest string) (group, id string, ok bool) {
	i := strings.LastIndexByte(rest, '/')
	if i <= 0 || i == len(rest)-1 {
		return "", "", false
	}
	return rest[:i], rest[i+1:], true
}

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
	data, _ := json.Marshal(actionRecord{Action: kind, Requested: time.Now().UTC()})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for attempt := 1; ; attempt++ {
		_, err := d.cli.Put(ctx, d.recordKey(group, id), string(data))
		if err == nil {
			break
		}
		if !backoff.Sleep(ctx, min(time.Duration(attempt)*200*time.Millisecond, 2*time.Second)) {
			d.log.WithError(err).WithFields(logrus.Fields{"group": group, "context": id, "action": kind}).
				Error("cannot record an rsync action; it is taken up at the next start-up")
			return
		}
	}
	d.opts.Claims.Want(group)
}

// record is an action record as read, with its key's revisions.
type record struct {
	id, key     string
	rec         actionRecord
	modRev      int64
	createRev   int64
	progress    *progressReport
	progressRev int64
}

// records reads a group's action records and progress reports in one
// transaction, oldest request first.
func (d *Dispatcher) records(ctx context.Context, group string) ([]*record, int64, error) {
	resp, err := d.cli.Txn(ctx).Then(
		clientv3.OpGet(d.actionsPrefix()+group+"/", clientv3.WithPrefix()),
		clientv3.OpGet(d.progressPrefix()+group+"/", clientv3.WithPrefix()),
	).Commit()
	if err != nil {
		return nil, 0, fmt.Errorf("read rsync actions of %s: %w", group, err)
	}
	byID := map[string]*record{}
	var out []*record
	for _, kv := range resp.Responses[0].GetResponseRange().Kvs {
		g, id, ok := split(strings.TrimPrefix(string(kv.Key), d.actionsPrefix()))
		if !ok || g != group {
			continue // a group whose name extends this one's
		}
		r := &record{id: id, key: string(kv.Key), modRev: kv.ModRevision, createRev: kv.CreateRevision}
		if err := json.Unmarshal(kv.Value, &r.rec); err != nil {
			d.log.WithField("key", string(kv.Key)).Warn("skipping a malformed rsync action record")
			continue
		}
		byID[id] = r
		out = append(out, r)
	}
	for _, kv := range resp.Responses[1].GetResponseRange().Kvs {
		g, id, ok := split(strings.TrimPrefix(string(kv.Key), d.progressPrefix()))
		if !ok || g != group || byID[id] == nil {
			continue
		}
		var p progressReport
		if json.Unmarshal(kv.Value, &p) == nil {
			byID[id].progress, byID[id].progressRev = &p, kv.ModRevision
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].modRev < out[j].modRev })
	return out, resp.Header.Revision, nil
}

// Busy reports whether an action on the group is requested or running. If
// etcd cannot tell, it answers true: callers refuse changes to a busy
// group, the safe side.
func (d *Dispatcher) Busy(group string) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	recs, _, err := d.records(ctx, group)
	if err != nil {
		d.log.WithError(err).WithField("group", group).Warn("cannot tell whether rsync is busy; assuming it is")
		return true
	}
	for _, r := range recs {
		if !r.rec.Stop {
			return true
		}
	}
	return false
}

// Stop cancels the actions in flight on the group — the latest and any
// other that is not the deletion of an earlier context, as Engine.Stop —
// and waits until the group's owner reports them halted; it reports
// whether any was in flight.
func (d *Dispatcher) Stop(group string) bool {
	ctx, cancel := context.WithTimeout(context.Background(), d.opts.StopWait)
	defer cancel()
	var targets []*record
	var markRev int64
	for {
		recs, _, err := d.records(ctx, group)
		if err != nil {
			d.log.WithError(err).WithField("group", group).Error("cannot stop rsync")
			return false
		}
		var live []*record
		for _, r := range recs {
			if !r.rec.Stop {
				live = append(live, r)
			}
		}
		if len(live) == 0 {
			return false
		}
		latest := live[len(live)-1]
		targets = targets[:0]
		var cmps []clientv3.Cmp
		var ops []clientv3.Op
		for _, r := range live {
			if r.rec.Action != actionDelete || r.id == latest.id {
				targets = append(targets, r)
				stopped := r.rec
				stopped.Stop = true
				data, _ := json.Marshal(stopped)
				cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(r.key), "=", r.modRev))
				ops = append(ops, clientv3.OpPut(r.key, string(data)))
			}
		}
		resp, err := d.cli.Txn(ctx).If(cmps...).Then(ops...).Commit()
		if err != nil {
			d.log.WithError(err).WithField("group", group).Error("cannot stop rsync")
			return false
		}
		if resp.Succeeded {
			markRev = resp.Header.Revision
			break
		}
		// A record changed meanwhile: look again.
	}
	d.opts.Claims.Want(group)
	if err := d.waitHalted(ctx, group, targets, markRev); err != nil {
		d.log.WithError(err).WithField("group", group).Warn("the group's owner did not report its actions stopped in time")
	}
	// The stopped records go: what stopped them now sets the context's
	// status, and a later request replaces them anyway.
	for _, t := range targets {
		_, err := d.cli.Txn(context.WithoutCancel(ctx)).If(clientv3.Compare(clientv3.ModRevision(t.key), "=", markRev)).
			Then(clientv3.OpDelete(t.key), clientv3.OpDelete(d.progressKey(group, t.id))).Commit()
		if err != nil {
			d.log.WithError(err).WithField("group", group).Warn("cannot remove a stopped rsync action record")
		}
	}
	return true
}

// waitHalted waits until every target's record was answered as halted (or
// is gone, or was replaced by a newer request).
func (d *Dispatcher) waitHalted(ctx context.Context, group string, targets []*record, markRev int64) error {
	return d.waitGroup(ctx, group, func(recs []*record) bool {
		byID := map[string]*record{}
		for _, r := range recs {
			byID[r.id] = r
		}
		for _, t := range targets {
			r := byID[t.id]
			if r == nil || r.modRev != markRev {
				continue // finished and removed, or superseded
			}
			if r.progress == nil || !r.progress.Halted || r.progress.Rev != markRev {
				return false
			}
		}
		return true
	})
}

// Idle waits until no action on the group is at work: none is requested,
// or each has tried every resource once and only waits for the world (see
// Engine.Idle); or ctx ends.
func (d *Dispatcher) Idle(ctx context.Context, group string) error {
	return d.waitGroup(ctx, group, func(recs []*record) bool {
		for _, r := range recs {
			if r.rec.Stop {
				continue
			}
			if r.progress == nil || !r.progress.Quiet || r.progress.Rev != r.modRev {
				return false
			}
		}
		return true
	})
}

// waitGroup reads the group's records and reports until done says so,
// waking on every change of them.
func (d *Dispatcher) waitGroup(ctx context.Context, group string, done func([]*record) bool) error {
	for {
		recs, rev, err := d.records(ctx, group)
		if err != nil {
			return err
		}
		if done(recs) {
			return nil
		}
		if err := d.waitChange(ctx, group, rev); err != nil {
			return err
		}
	}
}

// waitChange returns after the first change to the group's records or
// reports after rev.
func (d *Dispatcher) waitChange(ctx context.Context, group string, rev int64) error {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// One watch over both prefixes' common parent would see every group;
	// two narrow ones see only this one.
	a := d.cli.Watch(clientv3.WithRequireLeader(wctx), d.actionsPrefix()+group+"/", clientv3.WithPrefix(), clientv3.WithRev(rev+1))
	p := d.cli.Watch(clientv3.WithRequireLeader(wctx), d.progressPrefix()+group+"/", clientv3.WithPrefix(), clientv3.WithRev(rev+1))
	for {
		var resp clientv3.WatchResponse
		select {
		case resp = <-a:
		case resp = <-p:
		case <-ctx.Done():
			return ctx.Err()
		}
		// Progress notifications (read-your-writes waits ask for them on
		// the shared stream) change nothing; a closed or failed watch
		// (Canceled, or an error) ends the wait, as a change does.
		if !resp.IsProgressNotify() {
			return nil
		}
	}
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
	for {
		resp, err := d.cli.Get(ctx, d.actionsPrefix(), clientv3.WithPrefix())
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("rsync: read action records: %w", err)
		}
		for _, kv := range resp.Kvs {
			if group, _, ok := split(strings.TrimPrefix(string(kv.Key), d.actionsPrefix())); ok {
				d.opts.Claims.Want(group)
			}
		}
		err = d.follow(ctx, resp.Header.Revision)
		if ctx.Err() != nil {
			return nil
		}
		d.log.WithError(err).Warn("rsync action watch ended; resuming")
		if !backoff.Sleep(ctx, time.Second) {
			return nil
		}
	}
}

func (d *Dispatcher) follow(ctx context.Context, rev int64) error {
	w := d.cli.Watch(clientv3.WithRequireLeader(ctx), d.actionsPrefix(), clientv3.WithPrefix(), clientv3.WithRev(rev+1))
	for resp := range w {
		if err := resp.Err(); err != nil {
			return err
		}
		for _, ev := range resp.Events {
			group, id, ok := split(strings.TrimPrefix(string(ev.Kv.Key), d.actionsPrefix()))
			if !ok {
				continue
			}
			if ev.Type == mvccpb.DELETE {
				d.handle(group, &record{id: id, key: string(ev.Kv.Key), modRev: ev.Kv.ModRevision}, true)
				continue
			}
			d.opts.Claims.Want(group)
			r := &record{id: id, key: string(ev.Kv.Key), modRev: ev.Kv.ModRevision, createRev: ev.Kv.CreateRevision}
			if err := json.Unmarshal(ev.Kv.Value, &r.rec); err != nil {
				d.log.WithField("key", string(ev.Kv.Key)).Warn("skipping a malformed rsync action record")
				continue
			}
			d.handle(group, r, false)
		}
	}
	return ctx.Err()
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
	resp, err := d.cli.Get(ctx, d.actionsPrefix(), clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		return fmt.Errorf("rsync: resume: %w", err)
	}
	have := map[string]bool{}
	for _, kv := range resp.Kvs {
		if _, id, ok := split(strings.TrimPrefix(string(kv.Key), d.actionsPrefix())); ok {
			have[id] = true
		}
	}
	for _, c := range list { // oldest first: a group's deletion before its next instantiation
		kind := resumeAction(c.Status)
		if kind == "" || have[c.Meta.ID] || c.Meta.Group == "" {
			continue
		}
		data, _ := json.Marshal(actionRecord{Action: kind, Requested: time.Now().UTC()})
		key := d.recordKey(c.Meta.Group, c.Meta.ID)
		if _, err := d.cli.Txn(ctx).If(clientv3.Compare(clientv3.CreateRevision(key), "=", 0)).
			Then(clientv3.OpPut(key, string(data))).Commit(); err != nil {
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
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for attempt := 1; ; attempt++ {
		recs, _, err := d.records(ctx, group)
		if err == nil {
			for _, r := range recs {
				d.handle(group, r, false)
			}
			return
		}
		d.log.WithError(err).WithField("group", group).Warn("cannot read a group's rsync actions; retrying")
		if !backoff.Sleep(ctx, time.Duration(attempt)*500*time.Millisecond) {
			d.log.WithField("group", group).Error("a group's rsync actions could not be read: they wait for its next owner")
			return
		}
	}
}

// Released gives a group up: its runs are cancelled (their records stay
// for the next owner) and it returns once they stopped.
func (d *Dispatcher) Released(group string) {
	d.mu.Lock()
	delete(d.groups, group)
	for k := range d.seen {
		if g, _, ok := split(strings.TrimPrefix(k, d.actionsPrefix())); ok && g == group {
			delete(d.seen, k)
		}
	}
	d.mu.Unlock()
	d.opts.Engine.Release(group)
}

// handle acts on one record of an owned group: runs it, or stops its run.
// Records are handled once per revision, whether they come from the watch
// or from a takeover's read.
func (d *Dispatcher) handle(group string, r *record, deleted bool) {
	d.mu.Lock()
	defer d.mu.Unlock()
	g := d.groups[group]
	if g == nil || d.closing || r.modRev <= d.seen[r.key] {
		return
	}
	d.seen[r.key] = r.modRev
	if deleted {
		return
	}
	t := g.runs[r.id]
	if r.rec.Stop {
		if t != nil && !closed(t.r.done) {
			t.stopRev = r.modRev
			t.r.cancel() // its follower reports it halted once it stopped
			return
		}
		d.reportLocked(group, r.id, progressReport{Rev: r.modRev, Halted: true})
		return
	}
	kind := r.rec.Action
	if kind != actionApply && kind != actionUpdate && kind != actionDelete {
		d.log.WithFields(logrus.Fields{"group": group, "context": r.id, "action": kind}).Warn("skipping an unknown rsync action")
		return
	}
	run := d.opts.Engine.start(group, kind, r.id, kind == actionDelete)
	if t != nil && t.r == run { // the same action asked for again
		t.rev = r.modRev
		if t.quiet {
			d.reportLocked(group, r.id, progressReport{Rev: t.rev, Quiet: true})
		}
		return
	}
	t = &tracked{r: run, rev: r.modRev}
	g.runs[r.id] = t
	d.wg.Add(1)
	go d.followRun(group, r.id, t)
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
	key, rev := d.recordKey(group, id), t.rev
	d.writeLocked(func(ctx context.Context) {
		// Only the request this run answered: a newer one (or a stop mark)
		// changed the revision and is handled on its own.
		if _, err := d.cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(key), "=", rev)).
			Then(clientv3.OpDelete(key), clientv3.OpDelete(d.progressKey(group, id))).Commit(); err != nil {
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
	data, _ := json.Marshal(p)
	var opts []clientv3.OpOption
	if lease := d.opts.Lease(); lease != 0 {
		opts = append(opts, clientv3.WithLease(lease))
	}
	key := d.progressKey(group, id)
	d.writeLocked(func(ctx context.Context) {
		if _, err := d.cli.Put(ctx, key, string(data), opts...); err != nil {
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
