package ownership

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

// ErrFenced is the error of a write refused because this replica may no
// longer act for an item: it released the item, its lease changed, or the
// lease was not renewed within the renew deadline (it may have expired
// and the item gone to another replica).
var ErrFenced = errors.New("ownership: not the item's owner any more")

// A replica stops writing for its items before its lease can expire, as
// client-go's leader election stops at its RenewDeadline: the lease is
// renewed every TTL/5, each renewal's send time is recorded, and a write
// is allowed only while the last successful renewal was sent less than
// the renew deadline ago. The server counts the TTL from when it received
// the renewal, which is after it was sent, so the lease lives at least
// TTL past that time: a paused or cut-off replica stops writing with
// TTL − RenewDeadline to spare, before another can claim its items.
//
// That check and the write are two steps, so a replica paused between
// them (SIGSTOP, a long GC pause) writes late; every write therefore also
// carries a fencing token the store verifies: the item's claim revision
// (Fence.Token), compared by etcd in the write's transaction (Fence.Guard)
// or recorded on a cluster object and refused when older (rsync).

// renewal is when the lease was last renewed: the send time of the last
// keep-alive etcd answered.
type renewal struct {
	lease clientv3.LeaseID
	at    time.Time
}

// renewDeadline is the default share of the TTL a replica writes for
// after its last renewal: client-go's 10 s of 15.
func renewDeadline(ttl time.Duration) time.Duration { return ttl * 2 / 3 }

// ttlDuration is the lease TTL in force.
func (s *Set) ttlDuration() time.Duration { return time.Duration(s.ttl) * time.Second }

// renewed records a renewal of lease sent at sent, and wakes Fence.Wait.
func (s *Set) renewed(lease clientv3.LeaseID, sent time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.renewal.lease == lease && !sent.After(s.renewal.at) {
		return
	}
	s.renewal = renewal{lease: lease, at: sent}
	close(s.renewCh)
	s.renewCh = make(chan struct{})
}

// errRenewLate ends a session whose lease was not renewed within the
// renew deadline.
var errRenewLate = errors.New("ownership: lease not renewed within the renew deadline; its work was released")

// renewLoop renews the session's lease every TTL/5 until ctx ends and
// records each renewal's send time. The session keeps the lease alive
// too, but its keep-alive answers say nothing about when they were sent:
// an answer read late (after a pause) would look fresh. Once the last
// renewal was sent a renew deadline ago it returns errRenewLate: the
// fences fail already, and the items' work must stop too before the
// lease can expire and another replica claims them (client-go's leader
// election stops leading at its RenewDeadline likewise).
func (s *Set) renewLoop(ctx context.Context, sess *concurrency.Session) error {
	every := max(s.ttlDuration()/5, 100*time.Millisecond)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		sent := time.Now()
		rctx, cancel := context.WithTimeout(ctx, s.opts.RenewDeadline)
		resp, err := s.opts.Client.KeepAliveOnce(rctx, sess.Lease())
		cancel()
		switch {
		case err == nil && resp.TTL > 0:
			s.renewed(sess.Lease(), sent)
		case ctx.Err() != nil:
		case errors.Is(err, rpctypes.ErrLeaseNotFound):
			return errLeaseLost // etcd says it expired (a pause longer than the TTL)
		case s.renewalAge(sess.Lease()) >= s.opts.RenewDeadline:
			return errRenewLate
		}
		select {
		case <-ctx.Done():
			return nil
		case <-sess.Done():
			return nil
		case <-t.C:
		}
	}
}

// renewalAge is how long ago lease's last renewal was sent.
func (s *Set) renewalAge(lease clientv3.LeaseID) time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.renewal.lease != lease {
		return s.opts.RenewDeadline
	}
	return time.Since(s.renewal.at)
}

// Fence is this replica's right to write for one item it holds: Check
// and Wait say whether it still has it, Token and Guard are the fencing
// token writes carry. The zero Fence fences nothing (a process that
// shares no work).
type Fence struct {
	k     *Kind
	item  string
	lease clientv3.LeaseID
	rev   int64
}

// Fence returns the fence of an item this replica holds; false when it
// holds none.
func (k *Kind) Fence(item string) (Fence, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	lease, held := k.held[item]
	rev := k.revs[item]
	if !held || rev == 0 {
		return Fence{}, false
	}
	return Fence{k: k, item: item, lease: lease, rev: rev}, true
}

// Lease is the lease the claim is on (0 for the zero Fence): keys put on
// it go when the claim does.
func (f Fence) Lease() clientv3.LeaseID { return f.lease }

// Token is the fencing token: the revision at which this replica's claim
// on the item was created. A later owner's claim is always newer.
func (f Fence) Token() int64 { return f.rev }

// Guards are the transaction conditions that hold only while this claim
// (not merely one on this replica's lease) is the item's; none for the
// zero Fence.
func (f Fence) Guards() []clientv3.Cmp {
	if f.k == nil {
		return nil
	}
	return []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(f.k.claimKey(f.item)), "=", f.rev)}
}

// errLate is a renewal older than the renew deadline: Wait waits for the
// next one.
var errLate = errors.New("lease not renewed within the renew deadline")

// Check returns nil while this replica may write for the item: it holds
// the same claim, and its lease was renewed within the renew deadline.
// Otherwise the error wraps ErrFenced.
func (f Fence) Check() error {
	if f.k == nil {
		return nil
	}
	f.k.mu.Lock()
	lease, held := f.k.held[f.item]
	rev := f.k.revs[f.item]
	f.k.mu.Unlock()
	if !held || lease != f.lease || rev != f.rev {
		return fmt.Errorf("%w: %s %s was released", ErrFenced, f.k.name, f.item)
	}
	s := f.k.s
	s.mu.Lock()
	r := s.renewal
	s.mu.Unlock()
	if r.lease != f.lease {
		return fmt.Errorf("%w: %s %s: the replica's lease changed", ErrFenced, f.k.name, f.item)
	}
	if age := time.Since(r.at); age >= s.opts.RenewDeadline {
		return fmt.Errorf("%w: %s %s: %w (last renewed %s ago, deadline %s)", ErrFenced, f.k.name, f.item, errLate,
			age.Round(time.Millisecond), s.opts.RenewDeadline)
	}
	return nil
}

// Wait returns nil as soon as Check does. While only the renewal is late
// it waits for the next one, for at most the rest of the TTL (after that
// the lease is surely gone); anything else, or ctx ending, is returned
// at once.
func (f Fence) Wait(ctx context.Context) error {
	if f.k == nil {
		return nil
	}
	s := f.k.s
	var timeout <-chan time.Time
	for {
		s.mu.Lock()
		ch, at := s.renewCh, s.renewal.at
		s.mu.Unlock()
		err := f.Check()
		if err == nil || !errors.Is(err, errLate) {
			return err
		}
		if timeout == nil {
			t := time.NewTimer(time.Until(at.Add(s.ttlDuration())))
			defer t.Stop()
			timeout = t.C
		}
		select {
		case <-ch:
		case <-timeout:
			return err
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
