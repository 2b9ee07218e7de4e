package orchestrator

import (
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"

	"github.com/argus-mc/argus/src/internal/aai"
	"github.com/argus-mc/argus/src/internal/notify"
	"github.com/argus-mc/argus/src/internal/ownership"
	"github.com/argus-mc/argus/src/internal/status"
	etcdstore "github.com/argus-mc/argus/src/internal/store/etcd"
	mongostore "github.com/argus-mc/argus/src/internal/store/mongo"
)

// buildNotifications builds the subscription manager (each
// subscription's worker on the replica holding its claim) and, when
// configured, the AAI sink; both follow the context cache's changes.
func (a *App) buildNotifications(st *stores, ls *listeners, w *work) error {
	deliverer, err := notify.NewDeliverer(notify.DelivererOptions{Allow: a.opts.CallbackAllow, Deny: a.opts.CallbackDeny,
		Self: selfAddrs(st.etcd, st.mongo, ls.api, ls.grpc), MaxDeliveries: ls.deliveries, MaxDeliveriesPerHost: a.opts.Notify.MaxDeliveriesPerHost})
	if err != nil {
		return fmt.Errorf("orchestrator: callback policy: %w", err)
	}
	metrics, err := notify.NewMetrics(a.opts.Registry)
	if err != nil {
		return err
	}
	states := notify.NewStates(st.etcd.Client, a.opts.EtcdPrefix+"/notify/")
	w.notifier, err = notify.NewManager(notify.ManagerOptions{Catalog: st.catalog, States: states,
		Deliverer: deliverer, Feeds: w.reader, CheckQuery: status.CheckQuery, Metrics: metrics,
		Subscriptions: w.kinds.subscriptions, Prefix: a.opts.EtcdPrefix, Lease: st.replicas.Lease,
		MaxSubscriptions: a.opts.Notify.MaxSubscriptions, MaxPerSubject: a.opts.Notify.MaxSubscriptionsPerSubject,
		BackoffBase: a.opts.NotifyBackoffBase, Logger: a.log.WithField("component", "notify")})
	if err != nil {
		return err
	}
	w.kinds.subscriptions.Handle(ownership.HandlerFuncs{Acquire: w.notifier.AcquiredSubscription, Release: w.notifier.ReleasedSubscription})
	w.cache.OnChange(w.notifier.Changed)
	if w.kinds.sinks == nil {
		return nil
	}
	if w.sink, err = a.aaiSink(st, states, w); err != nil {
		return err
	}
	w.kinds.sinks.Handle(w.sink)
	w.cache.OnChange(w.sink.Changed)
	return nil
}

// aaiSink builds the AAI sink, which mirrors every v1 instance into AAI
// from the replica holding it.
func (a *App) aaiSink(st *stores, states *notify.States, w *work) (*aai.Sink, error) {
	password := ""
	if a.opts.AAI.PasswordFile != "" {
		data, err := os.ReadFile(a.opts.AAI.PasswordFile)
		if err != nil {
			return nil, fmt.Errorf("orchestrator: AAI password: %w", err)
		}
		password = strings.TrimSpace(string(data))
	}
	return aai.New(aai.Options{Client: aai.ClientOptions{URL: a.opts.AAI.URL, Username: a.opts.AAI.Username, Password: password,
		Tenants: a.opts.AAI.Tenants, SelfLink: a.opts.AAI.SelfLink},
		Catalog: st.catalog, Feeds: w.reader, States: states, Etcd: st.etcd.Client, Prefix: a.opts.EtcdPrefix,
		Claims: w.kinds.sinks, BackoffBase: a.opts.NotifyBackoffBase, Logger: a.log.WithField("component", "aai")})
}

// selfAddrs lists the addresses that reach this process: the API (and the
// gRPC status notifications) and the embedded stores. Callbacks never go
// there.
func selfAddrs(etcd *etcdstore.Store, mongo *mongostore.Store, listeners ...net.Listener) []string {
	var listen []string
	for _, ln := range listeners {
		if ln != nil {
			listen = append(listen, ln.Addr().String())
		}
	}
	for _, u := range append(append(etcd.Endpoints(), etcd.PeerEndpoints()...), mongo.EmbeddedURI()) {
		if p, err := url.Parse(u); err == nil && p.Host != "" {
			listen = append(listen, p.Host)
		}
	}
	return notify.SelfAddrs(listen...)
}
