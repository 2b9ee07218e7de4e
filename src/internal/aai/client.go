package aai

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"time"

	"github.com/argus-mc/argus/src/internal/errdefs"
	"github.com/argus-mc/argus/src/internal/notify"
	"github.com/argus-mc/argus/src/internal/status"
)

// ClientOptions configures the client of AAI's REST API.
type ClientOptions struct {
	// URL is AAI's versioned base, e.g. https://aai.onap:8443/aai/v24.
	URL string
	// Username and Password authenticate (HTTP basic) to AAI.
	Username, Password string
	// Tenants maps a cloud region to the AAI tenant its instances go under.
	Tenants map[string]string
	// SelfLink is the base URL of this Argus API, for each object's
	// selflink; "" leaves selflink out.
	SelfLink string
	// AttemptTimeout bounds each AAI request; 0 means 10s.
	AttemptTimeout time.Duration
	// HTTP; nil means a dedicated client.
	HTTP *http.Client
}

// client writes v1 instances' resources into ONAP AAI as k8s-resource
// objects under the instance's cloud region and tenant. Its senders are
// notify.Senders: a delivery's resource-changes become PUTs and DELETEs,
// which are idempotent, so a retried delivery is safe.
type client struct {
	opts ClientOptions
	http *http.Client
	// region gives an instance's AAI cloud owner and region (from its
	// connectivity info).
	region func(ctx context.Context, instanceID string) (owner, region string, err error)
}

func newClient(opts ClientOptions, region func(ctx context.Context, instanceID string) (string, string, error)) (*client, error) {
	u, err := url.Parse(opts.URL)
	if err != nil || !u.IsAbs() || (u.Scheme != "http" && u.Scheme != "https") {
		return nil, fmt.Errorf("aai: URL %q is not an absolute http(s) URL", opts.URL)
	}
	if opts.AttemptTimeout == 0 {
		opts.AttemptTimeout = 10 * time.Second
	}
	opts.URL = strings.TrimRight(opts.URL, "/")
	c := opts.HTTP
	if c == nil {
		c = &http.Client{}
	}
	return &client{opts: opts, http: c, region: region}, nil
}

// Resource is AAI's k8s-resource object.
type Resource struct {
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

// ID is the stable AAI id of one resource of an instance.
func ID(instanceID, key string) string {
	sum := sha256.Sum256([]byte(instanceID + "|" + key))
	return hex.EncodeToString(sum[:16])
}

// sender delivers one instance's changes; its objects live under base.
func (a *client) sender(instanceID, base string) notify.Sender { return sender{a, instanceID, base} }

type sender struct {
	a        *client
	id, base string
}

// Deliver applies one frozen payload's changes to AAI.
func (s sender) Deliver(ctx context.Context, d notify.Delivery) notify.Result {
	var body struct {
		Changes notify.Changes `json:"resource-changes"`
	}
	if err := json.Unmarshal(d.Body, &body); err != nil {
		return notify.Result{Outcome: notify.Failed, Err: err}
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
func (a *client) apply(ctx context.Context, base, instanceID, txID string, upserts []map[string]any, deletes []string) notify.Result {
	for _, p := range upserts {
		k := keyOfPayload(p)
		obj := Resource{ID: ID(instanceID, k.String()), Name: k.Name, Group: k.Group, Version: k.Version, Kind: k.Kind,
			Namespace: k.Namespace, Labels: labelsOf(p)}
		if a.opts.SelfLink != "" {
			obj.SelfLink = a.selfLink(instanceID, k)
		}
		if res := a.put(ctx, base, txID, obj); res.Outcome != notify.Delivered {
			return res
		}
	}
	for _, key := range deletes {
		if res := a.remove(ctx, base, txID, ID(instanceID, key)); res.Outcome != notify.Delivered {
			return res
		}
	}
	return notify.Result{Outcome: notify.Delivered, Status: http.StatusOK}
}

func (a *client) tenantURL(ctx context.Context, instanceID string) (string, error) {
	owner, region, err := a.region(ctx, instanceID)
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

func (a *client) selfLink(instanceID string, k status.ResourceKey) string {
	q := url.Values{"ApiVersion": {strings.TrimPrefix(k.Group+"/"+k.Version, "/")}, "Kind": {k.Kind}, "Name": {k.Name}}
	return strings.TrimRight(a.opts.SelfLink, "/") + "/v1/instance/" + url.PathEscape(instanceID) + "/query?" + q.Encode()
}

// put creates or updates one object; AAI wants the current
// resource-version on an update, so it is read first.
func (a *client) put(ctx context.Context, base, txID string, obj Resource) notify.Result {
	current, res := a.get(ctx, base, txID, obj.ID)
	if res.Outcome != notify.Delivered {
		return res
	}
	if current != nil {
		obj.ResourceVersion = current.ResourceVersion
	}
	data, err := json.Marshal(obj)
	if err != nil {
		return notify.Result{Outcome: notify.Failed, Err: err}
	}
	return a.do(ctx, http.MethodPut, base+url.PathEscape(obj.ID), txID, data, nil)
}

// remove deletes one object if it is there.
func (a *client) remove(ctx context.Context, base, txID, id string) notify.Result {
	current, res := a.get(ctx, base, txID, id)
	if res.Outcome != notify.Delivered || current == nil {
		return res
	}
	return a.do(ctx, http.MethodDelete, base+url.PathEscape(id)+"?resource-version="+url.QueryEscape(current.ResourceVersion), txID, nil, nil)
}

// get reads one object; nil when AAI does not have it.
func (a *client) get(ctx context.Context, base, txID, id string) (*Resource, notify.Result) {
	var obj Resource
	res := a.do(ctx, http.MethodGet, base+url.PathEscape(id), txID, nil, &obj)
	if res.Status == http.StatusNotFound {
		return nil, notify.Result{Outcome: notify.Delivered, Status: res.Status}
	}
	if res.Outcome != notify.Delivered {
		return nil, res
	}
	return &obj, res
}

func (a *client) do(ctx context.Context, method, u, txID string, body []byte, out any) notify.Result {
	ctx, cancel := context.WithTimeout(ctx, a.opts.AttemptTimeout)
	defer cancel()
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return notify.Result{Outcome: notify.Failed, Err: err}
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
	resp, err := a.http.Do(req)
	if err != nil {
		return notify.Result{Outcome: notify.Retry, Err: err}
	}
	defer func() {
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
		_ = resp.Body.Close()
	}()
	res := notify.Result{Outcome: notify.Classify(resp.StatusCode), Status: resp.StatusCode}
	if resp.StatusCode == http.StatusConflict || resp.StatusCode == http.StatusPreconditionFailed {
		// Someone else changed the object between our GET and write; the
		// retry reads its new resource-version.
		res.Outcome = notify.Retry
	}
	if res.Outcome != notify.Delivered {
		res.Err = fmt.Errorf("AAI answered %s %s with %d", method, u, resp.StatusCode)
		return res
	}
	if out != nil {
		if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(out); err != nil {
			return notify.Result{Outcome: notify.Retry, Status: resp.StatusCode, Err: fmt.Errorf("AAI answer: %w", err)}
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
