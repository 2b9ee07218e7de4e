package hub

import (
	"context"
	"errors"
	"time"

	"github.com/sirupsen/logrus"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/argus-mc/argus/src/internal/backoff"
)

// prefixWatch follows the keys under a prefix: a list, then a watch from
// just after it; a failed watch (a compaction, a lost leader) is listed and
// watched again, and onReset says events may have been missed.
type prefixWatch struct {
	cli     *clientv3.Client
	prefix  string
	log     *logrus.Entry
	onList  func(kvs []*mvccpb.KeyValue) // optional: the keys at each (re)start
	onEvent func(ev *clientv3.Event)
	onReset func() // optional: after a restart
	ready   func() // called once, after the first list
}

func (w prefixWatch) run(ctx context.Context) {
	first := true
	for attempt := 0; ; {
		err := w.follow(ctx, &first)
		if ctx.Err() != nil {
			return
		}
		attempt++
		w.log.WithError(err).Warn("watch failed; listing again")
		if !backoff.Sleep(ctx, min(time.Duration(attempt)*500*time.Millisecond, 5*time.Second)) {
			return
		}
	}
}

func (w prefixWatch) follow(ctx context.Context, first *bool) error {
	opts := []clientv3.OpOption{clientv3.WithPrefix()}
	if w.onList == nil {
		opts = append(opts, clientv3.WithCountOnly())
	}
	resp, err := w.cli.Get(ctx, w.prefix, opts...)
	if err != nil {
		return err
	}
	if w.onList != nil {
		w.onList(resp.Kvs)
	}
	if *first {
		*first = false
		if w.ready != nil {
			w.ready()
		}
	} else if w.onReset != nil {
		w.onReset()
	}
	wc := w.cli.Watch(clientv3.WithRequireLeader(ctx), w.prefix, clientv3.WithPrefix(), clientv3.WithRev(resp.Header.Revision+1))
	for wr := range wc {
		if err := wr.Err(); err != nil {
			return err
		}
		for _, ev := range wr.Events {
			w.onEvent(ev)
		}
	}
	return errors.New("watch closed")
}
