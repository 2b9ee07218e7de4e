package status

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"

	"github.com/argus-mc/argus/src/internal/appcontext"
)

// ManifestSource loads a resource's rendered manifest (appcontext.Manifests:
// the context cache keeps references, not manifests).
type ManifestSource interface {
	Get(ctx context.Context, id string, r appcontext.Resource) ([]byte, error)
}

var _ ManifestSource = (*appcontext.Manifests)(nil)

// WriteJSON writes the answer to w as json.Marshal would, but a resource at
// a time, building (or loading) each resource's detail just before it is
// written: a 60 MB output=detail answer holds one detail in memory, not
// the whole answer twice over (issue 23). w sees many small writes.
func (resp Response) WriteJSON(ctx context.Context, w io.Writer) error {
	apps, one := resp.Apps, resp.Cluster
	resp.Apps, resp.Cluster = nil, nil
	head, err := json.Marshal(resp)
	if err != nil {
		return err
	}
	if _, err := w.Write(head[:len(head)-1]); err != nil { // without its closing brace
		return err
	}
	if len(apps) > 0 {
		if _, err := io.WriteString(w, `,"apps":[`); err != nil {
			return err
		}
		for i, a := range apps {
			if err := resp.writeApp(ctx, w, a, i > 0); err != nil {
				return err
			}
		}
		if _, err := io.WriteString(w, "]"); err != nil {
			return err
		}
	}
	if one != nil {
		if _, err := io.WriteString(w, `,"cluster":`); err != nil {
			return err
		}
		if err := resp.writeCluster(ctx, w, *one); err != nil {
			return err
		}
	}
	_, err = io.WriteString(w, "}")
	return err
}

func (resp Response) writeApp(ctx context.Context, w io.Writer, a App, comma bool) error {
	clusters := a.Clusters
	a.Clusters = nil
	head, err := openList(a, "clusters")
	if err != nil {
		return err
	}
	if err := writeItem(w, head, comma); err != nil {
		return err
	}
	for i, c := range clusters {
		if i > 0 {
			if _, err := io.WriteString(w, ","); err != nil {
				return err
			}
		}
		if err := resp.writeCluster(ctx, w, c); err != nil {
			return err
		}
	}
	_, err = io.WriteString(w, "]}")
	return err
}

func (resp Response) writeCluster(ctx context.Context, w io.Writer, c Cluster) error {
	resources := c.Resources
	c.Resources = nil
	head, err := openList(c, "resources")
	if err != nil {
		return err
	}
	if _, err := w.Write(head); err != nil {
		return err
	}
	for i, r := range resources {
		if err := resp.resolve(ctx, &r); err != nil {
			return err
		}
		if err := writeResource(w, r, i > 0); err != nil {
			return err
		}
	}
	_, err = io.WriteString(w, "]}")
	return err
}

// writeResource writes r as json.Marshal would, but its detail (a
// manifest of up to megabytes) straight from where it is kept: marshalling
// it would copy it twice more (the encoder's buffer and its result), and
// a client that stops reading would hold those copies until it is cut.
func writeResource(w io.Writer, r Resource, comma bool) error {
	detail := r.Detail
	r.Detail = nil
	data, err := json.Marshal(r)
	if err != nil {
		return err
	}
	if len(detail) == 0 {
		return writeItem(w, data, comma)
	}
	if !json.Valid(detail) {
		return errors.New("status: a resource's detail is not JSON")
	}
	// Detail is the last field json.Marshal writes: reopen the object.
	if err := writeItem(w, append(data[:len(data)-1], `,"detail":`...), comma); err != nil {
		return err
	}
	if _, err := w.Write(detail); err != nil {
		return err
	}
	_, err = io.WriteString(w, "}")
	return err
}

// openList marshals v, whose last field is the list named field, left
// nil, and returns it open where that list's items go: `{…,"field":[`.
func openList(v any, field string) ([]byte, error) {
	data, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	tail := []byte(`"` + field + `":null}`)
	if !bytes.HasSuffix(data, tail) {
		return nil, errors.New("status: " + field + " is not the last field of its object")
	}
	return append(data[:len(data)-len(tail)], `"`+field+`":[`...), nil
}

func writeItem(w io.Writer, data []byte, comma bool) error {
	if comma {
		if _, err := io.WriteString(w, ","); err != nil {
			return err
		}
	}
	_, err := w.Write(data)
	return err
}

// resolve builds or loads r's deferred detail.
func (resp Response) resolve(ctx context.Context, r *Resource) error {
	switch {
	case r.entry != nil:
		r.Detail = entryObject(r.entry)
	case r.manifest != nil && resp.manifests != nil:
		data, err := resp.manifests.Get(ctx, resp.contextID, *r.manifest)
		if err != nil {
			return err
		}
		r.Detail = data
	}
	r.entry, r.manifest = nil, nil
	return nil
}

// Resolve builds every deferred detail in place, for a caller that needs
// the answer whole (a watch stream's snapshot event, a logical cloud's).
func (resp *Response) Resolve(ctx context.Context) error {
	for i := range resp.Apps {
		for j := range resp.Apps[i].Clusters {
			if err := resp.resolveAll(ctx, resp.Apps[i].Clusters[j].Resources); err != nil {
				return err
			}
		}
	}
	if resp.Cluster != nil {
		return resp.resolveAll(ctx, resp.Cluster.Resources)
	}
	return nil
}

func (resp *Response) resolveAll(ctx context.Context, rs []Resource) error {
	for k := range rs {
		if err := resp.resolve(ctx, &rs[k]); err != nil {
			return err
		}
	}
	return nil
}
