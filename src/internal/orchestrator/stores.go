package orchestrator

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/sirupsen/logrus"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/argus-mc/argus/src/internal/catalog"
	"github.com/argus-mc/argus/src/internal/ownership"
	etcdstore "github.com/argus-mc/argus/src/internal/store/etcd"
	mongostore "github.com/argus-mc/argus/src/internal/store/mongo"
)

// stores are what the stores phase opens: etcd and MongoDB, this
// replica's membership, and the catalogue.
type stores struct {
	etcd     *etcdstore.Store
	mongo    *mongostore.Store
	replicas *ownership.Set
	catalog  *catalog.Catalog
	// repairBefore is the start-up repairs' point: what was left half done
	// before it belongs to no live process (see openCatalog).
	repairBefore time.Time
}

// markerLifetime bounds how long a request may leave a catalogue marker
// (an upload's intent, a delete's mark) in place: well above the longest
// request the HTTP timeouts allow.
const markerLifetime = 10 * time.Minute

// openStores is the stores phase. Work is shared with the other replicas
// on these stores (alone, this replica owns everything): each cluster's
// watcher, each group's rsync actions and history, each subscription's
// worker and the AAI sink run on exactly one live replica.
func (a *App) openStores(ctx context.Context, life *lifecycle, ls *listeners, start time.Time) (*stores, error) {
	st := &stores{}
	var err error
	if st.etcd, st.mongo, err = a.dialStores(ctx); err != nil {
		return nil, err
	}
	life.onStop("stores", func() error {
		cctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		err := errors.Join(st.mongo.Close(cctx), st.etcd.Close())
		a.log.Info("stores closed")
		return err
	})
	// A NOSPACE alarm a previous run left is cleared where compaction can
	// clear it, before anything here writes; otherwise the orchestrator
	// serves reads only until space is freed (see etcdstore.Maintain).
	maintain := etcdstore.MaintainOptions{Interval: a.opts.Etcd.MaintainInterval, Logger: a.log.WithField("component", "etcd")}
	st.etcd.MaintainOnce(ctx, maintain)
	st.replicas, err = ownership.New(ownership.Options{Client: st.etcd.Client, Prefix: a.opts.EtcdPrefix, ID: a.opts.ReplicaID,
		URL: advertiseURL(a.opts.AdvertiseURL, ls.api.Addr(), a.cert != nil), TTL: a.opts.LeaseTTL,
		Registerer: a.opts.Registry, Logger: a.log.WithField("component", "ownership")})
	if err != nil {
		return nil, err
	}
	if st.catalog, err = a.openCatalog(ctx, st, start); err != nil {
		return nil, err
	}
	if err := a.keepStores(life, st, maintain); err != nil {
		return nil, err
	}
	return st, nil
}

// keepStores adds the stores' upkeep to the lifecycle: the catalogue's
// usage, which its limits are checked against, followed from its index;
// and etcd's maintenance (compaction, defragmentation, the NOSPACE
// alarm), which also brings the catalogue's index up to date once etcd
// takes writes again if the start found it full.
func (a *App) keepStores(life *lifecycle, st *stores, maintain etcdstore.MaintainOptions) error {
	trackUsage, err := st.catalog.TrackUsage()
	if err != nil {
		return fmt.Errorf("orchestrator: read the catalogue's usage: %w", err)
	}
	maintain.Writable = func(ctx context.Context) {
		if st.catalog.Indexed() {
			return
		}
		if _, err := st.catalog.Reindex(ctx); err != nil {
			a.log.WithError(err).Warn("cannot index the catalogue yet")
			return
		}
		a.log.Info("catalogue index brought up to date; reads come from it again")
	}
	life.add("etcd maintenance", func(ctx context.Context) error { return st.etcd.Maintain(ctx, maintain) }, nil)
	life.add("catalogue usage", trackUsage, nil)
	return nil
}

// openCatalog opens the catalogue. Markers (an upload in flight, a delete
// in progress) are signed with this replica's lease, so another replica
// starting never clears them, and those of a replica that died are cleared
// as soon as its lease is gone. Whatever a killed predecessor left half
// written (an app without its chart, a delete that never finished) is
// repaired before anyone reads. Unsigned leftovers (an older release's)
// count as a predecessor's when no other replica runs; otherwise only once
// older than any request can run. Gets, lists and parent checks then read
// the catalogue's index in etcd, which stays fast however large the
// catalogue grows (FerretDB reads a whole collection for most queries);
// while etcd is out of space the index cannot be repaired: reads then
// come from MongoDB, and the maintenance loop tries again once etcd takes
// writes (the API refuses changes until then).
func (a *App) openCatalog(ctx context.Context, st *stores, start time.Time) (*catalog.Catalog, error) {
	before := start
	if others, err := st.replicas.Others(ctx); err != nil {
		return nil, fmt.Errorf("orchestrator: list the replicas: %w", err)
	} else if others {
		before = start.Add(-markerLifetime)
	}
	st.repairBefore = before
	cli := st.etcd.Client
	owner := &catalog.Owner{ID: a.opts.ReplicaID, Lease: func() int64 { return int64(st.replicas.Lease()) },
		Alive: func(ctx context.Context, lease int64) (bool, error) {
			resp, err := cli.TimeToLive(ctx, clientv3.LeaseID(lease))
			if err != nil {
				return false, err
			}
			return resp.TTL > 0, nil
		}}
	// While MongoDB does not answer, catalogue writes fail at once (503,
	// saying why) and start nothing; reads served by the index go on.
	cat, opened, err := catalog.Open(ctx, catalog.Options{DB: st.mongo.DB, Owner: owner, RepairBefore: before,
		Index: cli, IndexPrefix: a.opts.EtcdPrefix, Limits: a.catalogLimits(), Available: st.mongo.Available, Guard: st.mongo.Guard,
		DeferIndex: func(error) bool { return st.etcd.NoSpace() != nil }})
	if err != nil {
		return nil, fmt.Errorf("orchestrator: open the catalogue: %w", err)
	}
	if rec := opened.Recovered; rec != (catalog.Recovered{}) {
		a.log.WithFields(logrus.Fields{"intents": rec.Intents, "unmarked": rec.Unmarked,
			"orphans": rec.Orphans, "lifecycles": rec.Lifecycles}).Warn("repaired the catalogue after an unclean stop")
	}
	if opened.IndexFixed > 0 {
		a.log.WithField("entries", opened.IndexFixed).Info("catalogue index brought up to date")
	}
	if opened.IndexDeferred != nil {
		a.log.WithError(opened.IndexDeferred).Error("the catalogue index waits for etcd to have space; reads come from MongoDB meanwhile")
	}
	return cat, nil
}

// catalogLimits are the catalogue's limits; the total's default is a
// quarter of etcd's quota, which the index shares with runtime state.
func (a *App) catalogLimits() catalog.Limits {
	l := a.opts.CatalogLimits
	if l.MaxObjectBytes == 0 {
		l.MaxObjectBytes = catalog.DefaultMaxObjectBytes
	}
	if l.MaxProjectBytes == 0 {
		l.MaxProjectBytes = catalog.DefaultMaxProjectBytes
	}
	if l.MaxTotalBytes == 0 {
		quota := a.opts.Etcd.QuotaBytes
		if quota <= 0 {
			quota = etcdstore.DefaultQuotaBytes
		}
		l.MaxTotalBytes = quota / 4
	}
	return l
}

// dialStores opens etcd and MongoDB concurrently: embedded, each takes a
// noticeable part of the start-up time.
func (a *App) dialStores(ctx context.Context) (*etcdstore.Store, *mongostore.Store, error) {
	var (
		wg       sync.WaitGroup
		etcd     *etcdstore.Store
		mongo    *mongostore.Store
		etcdErr  error
		mongoErr error
	)
	wg.Add(2)
	go func() {
		defer wg.Done()
		etcd, etcdErr = etcdstore.Open(ctx, etcdstore.Options{
			Endpoints:           a.opts.EtcdEndpoints,
			DataDir:             a.opts.DataDir,
			QuotaBytes:          a.opts.Etcd.QuotaBytes,
			CompactionRetention: a.opts.Etcd.CompactionRetention,
			Logger:              a.log.WithField("component", "etcd"),
		})
	}()
	go func() {
		defer wg.Done()
		mongo, mongoErr = mongostore.Open(ctx, mongostore.Options{
			URI:      a.opts.MongoURI,
			Database: a.opts.MongoDatabase,
			DataDir:  a.opts.DataDir,
			Logger:   a.log.WithField("component", "mongo"),
		})
	}()
	wg.Wait()
	if etcdErr != nil || mongoErr != nil {
		// Best effort: the open error is the one worth reporting.
		if etcd != nil {
			_ = etcd.Close()
		}
		if mongo != nil {
			_ = mongo.Close(context.Background())
		}
		return nil, nil, errors.Join(etcdErr, mongoErr)
	}
	return etcd, mongo, nil
}
