package hub

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// etcd gives a nested transaction only what its parent leaves of
// --max-txn-ops: a report of 100 statuses queued behind 99 one-key work
// records must not go into their transaction (etcd would refuse it, and
// every part with it).
func TestWriterKeepsNestedTransactionsWithinEtcdsLimit(t *testing.T) {
	m, err := newMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	w := newWriter(env.Etcd.Client, m)
	prefix := env.EtcdPrefix() + "/writer/"
	always := clientv3.Compare(clientv3.CreateRevision(prefix+"absent"), "=", 0)
	var wg sync.WaitGroup
	errs := make(chan error, 100)
	for i := range 99 {
		key := fmt.Sprintf("%swork/%02d", prefix, i)
		wg.Go(func() {
			_, err := w.put(t.Context(), key, always, clientv3.OpPut(key, "w"), 64)
			errs <- err
		})
	}
	wide := make([]clientv3.Op, maxPartOps)
	sizes := make([]int, maxPartOps)
	for i := range wide {
		wide[i], sizes[i] = clientv3.OpPut(fmt.Sprintf("%sreport/%03d", prefix, i), "r"), 64
	}
	wg.Go(func() { errs <- w.write(t.Context(), "cluster", always, wide, sizes) })
	// Everything is queued before the writer runs: one gather sees it all.
	deadline := time.Now().Add(30 * time.Second)
	for len(w.in) < 100 {
		if time.Now().After(deadline) {
			t.Fatalf("%d parts queued", len(w.in))
		}
		time.Sleep(10 * time.Millisecond) //nolint:forbidigo // polling with a deadline
	}
	ctx, cancel := context.WithCancel(t.Context())
	ran := make(chan struct{})
	go func() {
		defer close(ran)
		w.run(ctx)
	}()
	defer func() {
		cancel()
		<-ran
	}()
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	resp, err := env.Etcd.Client.Get(t.Context(), prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil || resp.Count != 99+maxPartOps {
		t.Fatalf("%v keys written, want %d: %v", resp.Count, 99+maxPartOps, err)
	}
}
