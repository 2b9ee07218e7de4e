package cluster

import (
	"context"
	"crypto/sha256"
	"fmt"
	"net/http"
	"sync"

	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"

	"github.com/argus-mc/argus/src/internal/appcontext"
)

// Client is what Argus needs to talk to one cluster.
type Client struct {
	Config    *rest.Config
	Dynamic   dynamic.Interface
	Discovery discovery.DiscoveryInterface
	// Metadata reads objects' metadata only (cheap watches of CRDs and
	// namespaces); nil when not available.
	Metadata metadata.Interface
	// Mapper maps kinds to resources; Reset it when a kind is not found,
	// since a CRD may have been installed since discovery was cached.
	Mapper *restmapper.DeferredDiscoveryRESTMapper
}

// KubeconfigSource returns a cluster's kubeconfig.
type KubeconfigSource func(ctx context.Context, ref appcontext.ClusterRef) ([]byte, error)

// Cloud names a project's logical cloud.
type Cloud struct {
	Project string
	Name    string
}

// CloudKubeconfigSource returns the kubeconfig a logical cloud's resources
// are applied with on a cluster (its user, its namespace).
type CloudKubeconfigSource func(ctx context.Context, ref appcontext.ClusterRef, cloud Cloud) ([]byte, error)

// Options configures a Registry.
type Options struct {
	Kubeconfig KubeconfigSource
	// CloudKubeconfig, when set, gives the credentials of logical clouds;
	// nil makes CloudClient answer with the cluster's own client.
	CloudKubeconfig CloudKubeconfigSource
	// KubeconfigOptions says what a stored kubeconfig may contain; the zero
	// value is the strict default (see ParseKubeconfig).
	KubeconfigOptions KubeconfigOptions
	// MaxResponse bounds one answer of a cluster's API server (a watch's
	// events are bounded by MaxWatchEvent); 0 means DefaultMaxResponse.
	MaxResponse int64
}

// Registry builds and caches clients.
type Registry struct {
	opts    Options
	mu      sync.Mutex
	clients map[clientKey]cached
}

// clientKey is a cluster and the logical cloud whose credentials the
// client uses (zero for the cluster's own).
type clientKey struct {
	ref   appcontext.ClusterRef
	cloud Cloud
}

type cached struct {
	sum    [32]byte
	client *Client
}

// NewRegistry returns a Registry.
func NewRegistry(opts Options) *Registry {
	if opts.MaxResponse <= 0 {
		opts.MaxResponse = DefaultMaxResponse
	}
	return &Registry{opts: opts, clients: map[clientKey]cached{}}
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
	return r.client(clientKey{ref: ref}, kc)
}

// CloudClient returns the client that acts as a logical cloud on the
// cluster: the cloud's user in the cloud's namespace for a standard cloud,
// the cluster's own client for an admin cloud or no cloud at all.
func (r *Registry) CloudClient(ctx context.Context, ref appcontext.ClusterRef, cloud Cloud) (*Client, error) {
	if cloud.Name == "" || r.opts.CloudKubeconfig == nil {
		return r.Client(ctx, ref)
	}
	kc, err := r.opts.CloudKubeconfig(ctx, ref, cloud)
	if err != nil {
		return nil, err
	}
	return r.client(clientKey{ref: ref, cloud: cloud}, kc)
}

func (r *Registry) client(key clientKey, kc []byte) (*Client, error) {
	sum := sha256.Sum256(kc)
	r.mu.Lock()
	defer r.mu.Unlock()
	if c, ok := r.clients[key]; ok && c.sum == sum {
		return c.client, nil
	}
	cfg, err := ParseKubeconfig(kc, r.opts.KubeconfigOptions)
	if err != nil {
		delete(r.clients, key) // never keep using a client the stored kubeconfig no longer allows
		return nil, fmt.Errorf("cluster %s: stored %w", key.ref, err)
	}
	// No client-wide Timeout: client-go applies it to watch streams too and
	// would cut informers' watches. Callers bound requests with contexts.
	// rsync bounds its own concurrency per cluster; the client-side rate
	// limit is a safety net that must not pace a large deployment.
	cfg.QPS, cfg.Burst = 200, 400
	cfg.UserAgent = "argus-orchestrator"
	// The cluster's answers are bounded, and foreign error bodies never
	// reach an error message (see boundedTransport).
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return &boundedTransport{next: rt, maxResponse: r.opts.MaxResponse}
	})
	c, err := NewClient(cfg)
	if err != nil {
		return nil, err
	}
	r.clients[key] = cached{sum: sum, client: c}
	return c, nil
}

// NewClient builds the clients of one cluster from its REST config (a
// fleet agent's own cluster, whose credentials are its service account's).
// Warnings go to the requests that asked for them (WithWarnings).
func NewClient(cfg *rest.Config) (*Client, error) {
	cfg = rest.CopyConfig(cfg)
	cfg.WarningHandlerWithContext = contextWarnings{}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	disc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return nil, err
	}
	meta, err := metadata.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	return &Client{Config: cfg, Dynamic: dyn, Discovery: disc, Metadata: meta,
		Mapper: restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(disc))}, nil
}

// Forget drops a cluster's cached clients, its own and its clouds' (the
// cluster was deleted).
func (r *Registry) Forget(ref appcontext.ClusterRef) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for k := range r.clients {
		if k.ref == ref {
			delete(r.clients, k)
		}
	}
}
