package cluster

import (
	"context"
	"crypto/sha256"
	"fmt"
	"sync"

	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"

	"github.com/argus-mc/argus/src/internal/appcontext"
)

// Client is what Argus needs to talk to one cluster.
type Client struct {
	Config    *rest.Config
	Dynamic   dynamic.Interface
	Discovery discovery.DiscoveryInterface
	// Mapper maps kinds to resources; Reset it when a kind is not found,
	// since a CRD may have been installed since discovery was cached.
	Mapper *restmapper.DeferredDiscoveryRESTMapper
}

// KubeconfigSource returns a cluster's kubeconfig.
type KubeconfigSource func(ctx context.Context, ref appcontext.ClusterRef) ([]byte, error)

// Options configures a Registry.
type Options struct {
	Kubeconfig KubeconfigSource
	// KubeconfigOptions says what a stored kubeconfig may contain; the zero
	// value is the strict default (see ParseKubeconfig).
	KubeconfigOptions KubeconfigOptions
}

// Registry builds and caches clients.
type Registry struct {
	opts    Options
	mu      sync.Mutex
	clients map[appcontext.ClusterRef]cached
}

type cached struct {
	sum    [32]byte
	client *Client
}

// NewRegistry returns a Registry.
func NewRegistry(opts Options) *Registry {
	return &Registry{opts: opts, clients: map[appcontext.ClusterRef]cached{}}
}

// Client returns the cluster's client, rebuilt when its kubeconfig changed.
// A stored kubeconfig is checked like an uploaded one: one that fails the
// check (written to the catalogue behind the API's back, or accepted by an
// older release) makes the cluster unusable with an errdefs.ErrInvalid
// naming the field, and nothing in it ever runs.
func (r *Registry) Client(ctx context.Context, ref appcontext.ClusterRef) (*Client, error) {
	kc, err := r.opts.Kubeconfig(ctx, ref)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(kc)
	r.mu.Lock()
	defer r.mu.Unlock()
	if c, ok := r.clients[ref]; ok && c.sum == sum {
		return c.client, nil
	}
	cfg, err := ParseKubeconfig(kc, r.opts.KubeconfigOptions)
	if err != nil {
		delete(r.clients, ref) // never keep using a client the stored kubeconfig no longer allows
		return nil, fmt.Errorf("cluster %s: stored %w", ref, err)
	}
	// No client-wide Timeout: client-go applies it to watch streams too and
	// would cut informers' watches. Callers bound requests with contexts.
	cfg.QPS, cfg.Burst = 100, 200
	cfg.UserAgent = "argus-orchestrator"
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	disc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return nil, err
	}
	c := &Client{Config: cfg, Dynamic: dyn, Discovery: disc,
		Mapper: restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(disc))}
	r.clients[ref] = cached{sum: sum, client: c}
	return c, nil
}

// Forget drops a cluster's cached client (the cluster was deleted).
func (r *Registry) Forget(ref appcontext.ClusterRef) {
	r.mu.Lock()
	delete(r.clients, ref)
	r.mu.Unlock()
}
