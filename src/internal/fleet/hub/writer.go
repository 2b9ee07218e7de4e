package hub

import (
	"context"
	"errors"
	"fmt"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// errSuperseded is a write refused by its guard: the session it was made
// for is no longer the cluster's (the agent reconnected elsewhere), or the
// work record it replaces changed since it was read.
var errSuperseded = errors.New("the agent's session was superseded")

// writer commits what agents report. Whatever waits while a transaction
// is in flight goes into the next, each cluster's part a sub-transaction
// guarded by its session key, so under load many agents' reports cost
// one etcd round trip, and a part whose session was superseded fails
// alone.
type writer struct {
	cli     *clientv3.Client
	metrics *metrics
	in      chan *part
}

// part is one cluster's writes, committed atomically under its guard.
// cluster names what the part writes: no two parts of one transaction
// share it (a placement's work record is named by its key).
type part struct {
	cluster string
	guard   clientv3.Cmp
	ops     []clientv3.Op
	bytes   int
	done    chan error
	rev     int64 // the transaction's revision, set before done
}

// Limits of one transaction: etcd refuses more than 128 operations at one
// level (--max-txn-ops), a nested transaction getting only what its
// parent leaves (128 less the parent's operations, fits below), and
// requests over 1.5 MiB (--max-request-bytes).
const (
	maxTxnOps   = 128
	maxPartOps  = 100
	maxTxnParts = 100
	maxTxnBytes = 1 << 20
)

// fits reports whether a transaction of parts sub-transactions, the
// largest of widest operations, is one etcd takes.
func fits(parts, widest int) bool { return parts <= maxTxnParts && parts+widest <= maxTxnOps }

func newWriter(cli *clientv3.Client, m *metrics) *writer {
	return &writer{cli: cli, metrics: m, in: make(chan *part, 256)}
}

// write commits ops for cluster under guard, in parts of at most
// maxPartOps operations, in order; it returns errSuperseded when the
// guard failed.
func (w *writer) write(ctx context.Context, cluster string, guard clientv3.Cmp, ops []clientv3.Op, sizes []int) error {
	for start := 0; start < len(ops); start += maxPartOps {
		end := min(start+maxPartOps, len(ops))
		p := &part{cluster: cluster, guard: guard, ops: ops[start:end], done: make(chan error, 1)}
		for _, n := range sizes[start:end] {
			p.bytes += n
		}
		if err := w.submit(ctx, p); err != nil {
			return err
		}
	}
	return nil
}

// put commits one write under guard in the next transaction, named id,
// and returns the transaction's revision; errSuperseded when the guard
// failed. Thousands of placements published at once cost a transaction
// per hundred of them, not one each.
func (w *writer) put(ctx context.Context, id string, guard clientv3.Cmp, op clientv3.Op, size int) (int64, error) {
	p := &part{cluster: id, guard: guard, ops: []clientv3.Op{op}, bytes: size, done: make(chan error, 1)}
	if err := w.submit(ctx, p); err != nil {
		return 0, err
	}
	return p.rev, nil
}

// submit queues p and waits until its transaction committed.
func (w *writer) submit(ctx context.Context, p *part) error {
	select {
	case w.in <- p:
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case err := <-p.done:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// run commits parts until ctx ends.
func (w *writer) run(ctx context.Context) {
	var next *part // held over: its cluster already had a part in the batch
	for {
		batch, bytes := []*part{}, 0
		if next != nil {
			batch, bytes, next = append(batch, next), next.bytes, nil
		} else {
			select {
			case p := <-w.in:
				batch, bytes = append(batch, p), p.bytes
			case <-ctx.Done():
				return
			}
		}
		clusters := map[string]bool{batch[0].cluster: true}
		widest := len(batch[0].ops)
	gather:
		for len(batch) < maxTxnParts {
			select {
			case p := <-w.in:
				// Two parts of a cluster would write one key twice; a wide
				// part among many would leave it too few operations.
				if clusters[p.cluster] || bytes+p.bytes > maxTxnBytes || !fits(len(batch)+1, max(widest, len(p.ops))) {
					next = p
					break gather
				}
				clusters[p.cluster] = true
				widest = max(widest, len(p.ops))
				batch, bytes = append(batch, p), bytes+p.bytes
			default:
				break gather
			}
		}
		w.commit(ctx, batch)
	}
}

func (w *writer) commit(ctx context.Context, batch []*part) {
	ops := make([]clientv3.Op, len(batch))
	n := 0
	for i, p := range batch {
		ops[i] = clientv3.OpTxn([]clientv3.Cmp{p.guard}, p.ops, nil)
		n += len(p.ops)
	}
	resp, err := w.cli.Txn(ctx).Then(ops...).Commit()
	w.metrics.txns.Inc()
	w.metrics.ops.Add(float64(n))
	for i, p := range batch {
		switch {
		case err != nil:
			p.done <- fmt.Errorf("commit the fleet's writes: %w", err)
		case !resp.Responses[i].GetResponseTxn().GetSucceeded():
			p.done <- errSuperseded
		default:
			p.rev = resp.Header.Revision
			p.done <- nil
		}
	}
}
