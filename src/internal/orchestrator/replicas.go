package orchestrator

import (
	"context"
	"fmt"
	"net"
	"os"
	"sort"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/argus-mc/argus/src/internal/api"
	"github.com/argus-mc/argus/src/internal/appcontext"
	"github.com/argus-mc/argus/src/internal/catalog"
	"github.com/argus-mc/argus/src/internal/ownership"
)

// Kinds of owned work: each item is run by exactly one replica.
const (
	kindClusters      = "clusters"      // a cluster's watcher, "<provider>+<cluster>"
	kindGroups        = "groups"        // a DIG's, instance's, logical cloud's or network group's rsync actions and history
	kindSubscriptions = "subscriptions" // a subscription's delivery worker, by its state key
	kindSinks         = "sinks"         // the AAI sink, "aai"
)

// replicaView answers GET /v2/system/replicas from etcd: the members and
// every kind's claims.
type replicaView struct{ set *ownership.Set }

func (v replicaView) Replicas(ctx context.Context) ([]api.Replica, error) {
	members, err := v.set.Members(ctx)
	if err != nil {
		return nil, err
	}
	claims := map[string]map[string]string{}
	for _, kind := range []string{kindClusters, kindGroups, kindSubscriptions, kindSinks} {
		if claims[kind], err = v.set.Claims(ctx, kind); err != nil {
			return nil, err
		}
	}
	out := make([]api.Replica, 0, len(members))
	for _, m := range members {
		r := api.Replica{ID: m.ID, URL: m.URL, Started: m.Started, LeaseExpires: m.LeaseExpires,
			Clusters: []string{}, Subscriptions: []string{}, DIGs: []string{}, Instances: []string{}}
		for item, holder := range claims[kindClusters] {
			if holder == m.ID {
				r.Clusters = append(r.Clusters, item)
			}
		}
		for item, holder := range claims[kindSubscriptions] {
			if holder == m.ID {
				r.Subscriptions = append(r.Subscriptions, item)
			}
		}
		for item, holder := range claims[kindSinks] {
			if holder == m.ID {
				r.Sinks = append(r.Sinks, item)
			}
		}
		for group, holder := range claims[kindGroups] {
			if holder != m.ID {
				continue
			}
			switch g, _ := catalog.ParseGroup(group); g.Kind {
			case catalog.GroupDIG:
				r.DIGs = append(r.DIGs, strings.Join(g.Key, "/"))
			case catalog.GroupInstance:
				r.Instances = append(r.Instances, g.Key[0])
			default:
				r.Groups = append(r.Groups, group)
			}
		}
		for _, l := range [][]string{r.Clusters, r.Subscriptions, r.Sinks, r.DIGs, r.Instances, r.Groups} {
			sort.Strings(l)
		}
		out = append(out, r)
	}
	return out, nil
}

var _ api.ReplicaSet = replicaView{}

// consistency gives API writers read-your-writes through the context
// cache (status and SSE read it; the catalogue is read from MongoDB).
type consistency struct {
	cli   *clientv3.Client
	cache *appcontext.Cache
}

func (c consistency) Revision(ctx context.Context) (int64, error) {
	// A linearizable read of a key nobody writes: its header is the
	// store's revision now.
	resp, err := c.cli.Get(ctx, "\x00argus-revision", clientv3.WithCountOnly())
	if err != nil {
		return 0, err
	}
	return resp.Header.Revision, nil
}

func (c consistency) WaitRevision(ctx context.Context, rev int64) error {
	return c.cache.WaitRevision(ctx, rev)
}

var _ api.Consistency = consistency{}

// advertiseURL is where clients reach this replica: the configured URL, or
// the listen address with the host name for an unspecified host.
func advertiseURL(configured string, addr net.Addr, tls bool) string {
	if configured != "" {
		return configured
	}
	host, port, err := net.SplitHostPort(addr.String())
	if err != nil {
		return ""
	}
	if ip := net.ParseIP(host); ip == nil || ip.IsUnspecified() {
		if h, err := os.Hostname(); err == nil && h != "" {
			host = h
		}
	}
	scheme := "http"
	if tls {
		scheme = "https"
	}
	return fmt.Sprintf("%s://%s", scheme, net.JoinHostPort(host, port))
}
