package notify

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/argus-mc/argus/src/internal/backoff"
	"github.com/argus-mc/argus/src/internal/catalog"
	"github.com/argus-mc/argus/src/internal/errdefs"
	"github.com/argus-mc/argus/src/internal/status"
)

// AAIOptions configures the AAI inventory sink.
type AAIOptions struct {
	// URL is AAI's versioned base, e.g. https://aai.onap:8443/aai/v24.
	URL string
	// Username and Password authenticate (HTTP basic) to AAI.
	Username, Password string
	// Tenants maps a cloud region to the AAI tenant its instances go under.
	Tenants map[string]string
	// Region gives an instance's AAI cloud owner and region (from its
	// connectivity info).
	Region func(ctx context.Context, instanceID string) (owner, region string, err error)
	// SelfLink is the base URL of this Argus API, for each object's
	// selflink; "" leaves selflink out.
	SelfLink string
	// AttemptTimeout bounds each AAI request; 0 means 10s.
	AttemptTimeout time.Duration
	// Client; nil means a dedicated one.
	Client *http.Client
}

// AAISink mirrors v1 instances' resources into ONAP AAI as k8s-resource
// objects under the instance's cloud region and tenant. It is a Sender:
// a delivery's resource-changes become PUTs and DELETEs, which are
// idempotent, so a retried delivery is safe.
type AAISink struct {
	opts   AAIOptions
	client *http.Client
}

// NewAAISink checks opts and returns the sink.
func NewAAISink(opts AAIOptions) (*AAISink, error) {
	u, err := url.Parse(opts.URL)
	if err != nil || !u.IsAbs() || (u.Scheme != "http" && u.Scheme != "https") {
		return nil, fmt.Errorf("notify: AAI URL %q is not an absolute http(s) URL", opts.URL)
	}
	if opts.Region == nil {
		return nil, errors.New("notify: AAI sink needs Region")
	}
	if opts.AttemptTimeout == 0 {
		opts.AttemptTimeout = 10 * time.Second
	}
	opts.URL = strings.TrimRight(opts.URL, "/")
	c := opts.Client
	if c == nil {
		c = &http.Client{}
	}
	return &AAISink{opts: opts, client: c}, nil
}

// AAIResource is AAI's k8s-resource object.
type AAIResource struct {
	ID              string   `json:"id"`
	Name            string   `json:"name"`
	Group           string   `json:"group"`
	Version         string   `json:"version"`
	Kind            string   `json:"kind"`
	Namespace       string   `json:"namespace"`
	Labels          []string `json:"labels,omitempty"`
	SelfLink        string   `json:"selflink,omitempty"`
	ResourceVersion string   `json:"resource-version,omitempty"`
}

// AAIID is the stable AAI id of one resource of an instance.
func AAIID(instanceID, key string) string {
	sum := sha256.Sum256([]byte(instanceID + "|" + key))
	return hex.EncodeToString(sum[:16])
}

// sender is the sink for one instance, whose objects live under base.
func (a *AAISink) sender(instanceID, base string) Sender { return aaiSender{a, instanceID, base} }

type aaiSender struct {
	a        *AAISink
	id, base string
}

// Deliver applies one frozen payload's changes to AAI.
func (s aaiSender) Deliver(ctx context.Context, d Delivery) Result {
	var body struct {
		Changes Changes `json:"resource-changes"`
	}
	if err := json.Unmarshal(d.Body, &body); err != nil {
		return Result{Outcome: Failed, Err: err}
	}
	var upserts []map[string]any
	upserts = append(append(upserts, body.Changes.Created...), body.Changes.Modified...)
	var deletes []string
	for _, p := range body.Changes.Deleted {
		deletes = append(deletes, keyOfPayload(p).String())
	}
	return s.a.apply(ctx, s.base, s.id, d.ID, upserts, deletes)
}

// apply makes AAI hold upserts and not hold deletes, for one instance.
func (a *AAISink) apply(ctx context.Context, base, instanceID, txID string, upserts []map[string]any, deletes []string) Result {
	for _, p := range upserts {
		k := keyOfPayload(p)
		obj := AAIResource{ID: AAIID(instanceID, k.String()), Name: k.Name, Group: k.Group, Version: k.Version, Kind: k.Kind,
			Namespace: k.Namespace, Labels: labelsOf(p)}
		if a.opts.SelfLink != "" {
			obj.SelfLink = a.selfLink(instanceID, k)
		}
		if res := a.put(ctx, base, txID, obj); res.Outcome != Delivered {
			return res
		}
	}
	for _, key := range deletes {
		if res := a.remove(ctx, base, txID, AAIID(instanceID, key)); res.Outcome != Delivered {
			return res
		}
	}
	return Result{Outcome: Delivered, Status: http.StatusOK}
}

func (a *AAISink) tenantURL(ctx context.Context, instanceID string) (string, error) {
	owner, region, err := a.opts.Region(ctx, instanceID)
	if err != nil {
		return "", err
	}
	tenant, ok := a.opts.Tenants[region]
	if !ok {
		return "", errdefs.Invalid("no AAI tenant is configured for cloud region %q", region)
	}
	return fmt.Sprintf("%s/cloud-infrastructure/cloud-regions/cloud-region/%s/%s/tenants/tenant/%s/k8s-resources/k8s-resource/",
		a.opts.URL, url.PathEscape(owner), url.PathEscape(region), url.PathEscape(tenant)), nil
}

func (a *AAISink) selfLink(instanceID string, k status.ResourceKey) string {
	q := url.Values{"ApiVersion": {strings.TrimPrefix(k.Group+"/"+k.Version, "/")}, "Kind": {k.Kind}, "Name": {k.Name}}
	return strings.TrimRight(a.opts.SelfLink, "/") + "/v1/instance/" + url.PathEscape(instanceID) + "/query?" + q.Encode()
}

// put creates or updates one object; AAI wants the current
// resource-version on an update, so it is read first.
func (a *AAISink) put(ctx context.Context, base, txID string, obj AAIResource) Result {
	current, res := a.get(ctx, base, txID, obj.ID)
	if res.Outcome != Delivered {
		return res
	}
	if current != nil {
		obj.ResourceVersion = current.ResourceVersion
	}
	data, err := json.Marshal(obj)
	if err != nil {
		return Result{Outcome: Failed, Err: err}
	}
	return a.do(ctx, http.MethodPut, base+url.PathEscape(obj.ID), txID, data, nil)
}

// remove deletes one object if it is there.
func (a *AAISink) remove(ctx context.Context, base, txID, id string) Result {
	current, res := a.get(ctx, base, txID, id)
	if res.Outcome != Delivered || current == nil {
		return res
	}
	return a.do(ctx, http.MethodDelete, base+url.PathEscape(id)+"?resource-version="+url.QueryEscape(current.ResourceVersion), txID, nil, nil)
}

// get reads one object; nil when AAI does not have it.
func (a *AAISink) get(ctx context.Context, base, txID, id string) (*AAIResource, Result) {
	var obj AAIResource
	res := a.do(ctx, http.MethodGet, base+url.PathEscape(id), txID, nil, &obj)
	if res.Status == http.StatusNotFound {
		return nil, Result{Outcome: Delivered, Status: res.Status}
	}
	if res.Outcome != Delivered {
		return nil, res
	}
	return &obj, res
}

func (a *AAISink) do(ctx context.Context, method, u, txID string, body []byte, out any) Result {
	ctx, cancel := context.WithTimeout(ctx, a.opts.AttemptTimeout)
	defer cancel()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return Result{Outcome: Failed, Err: err}
	}
	req.Header.Set("Accept", "application/json")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	req.Header.Set("X-FromAppId", "argus")
	req.Header.Set("X-TransactionId", txID)
	if a.opts.Username != "" {
		req.SetBasicAuth(a.opts.Username, a.opts.Password)
	}
	resp, err := a.client.Do(req)
	if err != nil {
		return Result{Outcome: Retry, Err: err}
	}
	defer func() {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
		_ = resp.Body.Close()
	}()
	res := Result{Outcome: classify(resp.StatusCode), Status: resp.StatusCode}
	if resp.StatusCode == http.StatusConflict || resp.StatusCode == http.StatusPreconditionFailed {
		// Someone else changed the object between our GET and write; the
		// retry reads its new resource-version.
		res.Outcome = Retry
	}
	if res.Outcome != Delivered {
		res.Err = fmt.Errorf("AAI answered %s %s with %d", method, u, resp.StatusCode)
		return res
	}
	if out != nil {
		if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(out); err != nil {
			return Result{Outcome: Retry, Status: resp.StatusCode, Err: fmt.Errorf("AAI answer: %w", err)}
		}
	}
	return res
}

// keyOfPayload reads a resource's identity back from its payload entry.
func keyOfPayload(p map[string]any) status.ResourceKey {
	str := func(m map[string]any, k string) string { s, _ := m[k].(string); return s }
	k := status.ResourceKey{App: str(p, "app"), ClusterProvider: str(p, "cluster-provider"), Cluster: str(p, "cluster"),
		Namespace: str(p, "namespace"), Name: str(p, "name")}
	if gvk, ok := p["GVK"].(map[string]any); ok {
		k.Group, k.Version, k.Kind = str(gvk, "Group"), str(gvk, "Version"), str(gvk, "Kind")
	}
	return k
}

// labelsOf lists the object's labels as AAI's "key=value" strings.
func labelsOf(p map[string]any) []string {
	obj, _ := p["status"].(map[string]any)
	meta, _ := obj["metadata"].(map[string]any)
	labels, _ := meta["labels"].(map[string]any)
	out := make([]string, 0, len(labels))
	for k, v := range labels {
		out = append(out, fmt.Sprintf("%s=%v", k, v))
	}
	sort.Strings(out)
	return out
}

func aaiKey(instanceID string) string { return "aai/" + instanceID }

// ensureAAI starts an instance's mirroring worker unless it runs; it
// checks the instance exists, so the changes of a deleted instance's
// termination do not bring mirroring back.
func (m *Manager) ensureAAI(id string) {
	m.mu.Lock()
	_, running := m.workers[aaiKey(id)]
	ctx := m.runCtx
	// One check at a time per instance, and none for an instance known not
	// to be mirrorable (its region has no tenant): a busy instance must not
	// queue a lookup per change.
	skip := running || ctx == nil || !m.aaiOwned || m.aaiBusy[id] || m.aaiSkip[id]
	if !skip {
		m.aaiBusy[id] = true
	}
	m.mu.Unlock()
	if skip {
		return
	}
	m.goOwned(func() {
		defer func() {
			m.mu.Lock()
			delete(m.aaiBusy, id)
			m.mu.Unlock()
		}()
		m.ops.Lock()
		defer m.ops.Unlock()
		m.mu.Lock()
		_, running := m.workers[aaiKey(id)]
		owned := m.aaiOwned
		m.mu.Unlock()
		if running || !owned {
			return
		}
		if _, err := catalog.For[catalog.InstanceSpec](m.opts.Catalog, catalog.Instances).Get(ctx, catalog.Key{id}); err != nil {
			return
		}
		// Where the instance's objects live is kept with the state: the
		// purge after a delete can no longer look the instance up.
		base, err := m.opts.AAI.tenantURL(ctx, id)
		if err != nil {
			if errors.Is(err, errdefs.ErrInvalid) {
				m.mu.Lock()
				m.aaiSkip[id] = true
				m.mu.Unlock()
			}
			m.log.WithError(err).WithField("instance", id).Warn("instance not mirrored into AAI")
			return
		}
		st, _, err := m.opts.States.Load(ctx, aaiKey(id))
		if err == nil && st.Target != base {
			st.Target = base
			err = m.opts.States.SaveIf(ctx, aaiKey(id), st, m.opts.Sinks.Guard(aaiItem))
		}
		if err != nil {
			m.log.WithError(err).WithField("instance", id).Error("cannot start AAI mirroring")
			return
		}
		subj := InstanceSubject(id)
		w, err := NewWorker(WorkerOptions{Key: aaiKey(id), Source: m.source(subj, Subscription{}), States: m.opts.States,
			Deliverer: m.opts.AAI.sender(id, base), BackoffBase: m.opts.BackoffBase,
			Guard:  func() clientv3.Cmp { return m.opts.Sinks.Guard(aaiItem) },
			Logger: m.log.WithField("sink", "aai")})
		if err != nil {
			m.log.WithError(err).Error("cannot start AAI mirroring")
			return
		}
		m.run(subj, w) // a resumed worker first catches up with what changed
	})
}

// purgeAAI removes a deleted instance's objects from AAI in the
// background, retrying until AAI answers; the delivered state is kept
// until then, so a restart resumes the purge (see resumePurges).
func (m *Manager) purgeAAI(_ context.Context, id string) error {
	m.mu.Lock()
	ctx := m.runCtx
	// One purge loop per instance: resumes after every marker watch
	// reconnect ask again for the purges still running.
	running := m.aaiPurging[id]
	m.aaiPurging[id] = true
	m.mu.Unlock()
	if running {
		return nil
	}
	done := func() {
		m.mu.Lock()
		delete(m.aaiPurging, id)
		m.mu.Unlock()
	}
	if !m.goOwned(func() {
		defer done()
		for attempt := 1; m.aaiIsOwned(); attempt++ {
			err := m.purgeOnce(ctx, id)
			if err == nil {
				if _, err := m.opts.States.cli.Delete(ctx, m.purgePrefix()+id); err != nil {
					m.log.WithError(err).WithField("instance", id).Warn("cannot clear a finished AAI purge request")
				}
				return
			}
			if ctx.Err() != nil {
				return
			}
			m.log.WithError(err).WithField("instance", id).Warn("cannot remove a deleted instance from AAI; retrying")
			if !backoff.Sleep(ctx, scaledBackoff(m.opts.BackoffBase, attempt)) {
				return
			}
		}
	}) {
		done() // the manager is stopping
	}
	return nil
}

func (m *Manager) purgeOnce(ctx context.Context, id string) error {
	st, found, err := m.opts.States.Load(ctx, aaiKey(id))
	if err != nil || !found {
		return err
	}
	keys := map[string]bool{}
	for k := range st.Delivered {
		keys[k] = true
	}
	if st.Pending != nil { // it may have reached AAI in part
		for k := range st.Pending.Next {
			keys[k] = true
		}
	}
	deletes := make([]string, 0, len(keys))
	for k := range keys {
		deletes = append(deletes, k)
	}
	sort.Strings(deletes)
	if st.Target == "" { // never mirrored
		return m.opts.States.Delete(ctx, aaiKey(id))
	}
	if res := m.opts.AAI.apply(ctx, st.Target, id, newID(), nil, deletes); res.Outcome != Delivered {
		return fmt.Errorf("purge: %w", res.Err)
	}
	return m.opts.States.Delete(ctx, aaiKey(id))
}

// resumePurges finishes the purges of instances deleted before a restart.
func (m *Manager) resumePurges(ctx context.Context) error {
	states, err := m.opts.States.LoadPrefix(ctx, "aai/")
	if err != nil {
		return err
	}
	for key := range states {
		id := strings.TrimPrefix(key, "aai/")
		_, err := catalog.For[catalog.InstanceSpec](m.opts.Catalog, catalog.Instances).Get(ctx, catalog.Key{id})
		if errors.Is(err, errdefs.ErrNotFound) {
			_ = m.purgeAAI(ctx, id)
		}
	}
	return nil
}
