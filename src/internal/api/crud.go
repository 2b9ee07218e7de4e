package api

import (
	"net/http"

	"github.com/gorilla/mux"

	"github.com/argus-mc/argus/src/internal/catalog"
	"github.com/argus-mc/argus/src/internal/errdefs"
)

// crud serves the EMCO collection conventions for one catalogue kind:
// POST/GET on the collection, GET/PUT/DELETE on /{name}.
type crud[S any] struct {
	res *catalog.Resource[S]
	// collection is the collection's full path template, with the parent's
	// variables, e.g. "/v2/projects/{project}/composite-apps".
	collection string
	// vars are the route variables forming the key, outermost first; the
	// last names the object itself.
	vars []string
	// validate checks a spec beyond its name; nil accepts any.
	validate func(*catalog.Object[S]) error
}

func registerCRUD[S any](r *mux.Router, s *server, c crud[S]) {
	coll := c.collection
	item := coll + "/{" + c.vars[len(c.vars)-1] + "}"
	r.HandleFunc(coll, s.handle(c.create)).Methods(http.MethodPost)
	r.HandleFunc(coll, s.handle(c.list)).Methods(http.MethodGet)
	r.HandleFunc(item, s.handle(c.get)).Methods(http.MethodGet)
	r.HandleFunc(item, s.handle(c.put)).Methods(http.MethodPut)
	r.HandleFunc(item, s.handle(c.delete)).Methods(http.MethodDelete)
}

// handlerFunc is a handler that reports failure by returning an error.
type handlerFunc func(s *server, w http.ResponseWriter, r *http.Request) error

func (s *server) handle(h handlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if err := h(s, w, r); err != nil {
			writeError(w, r, err)
		}
	}
}

func (c crud[S]) key(r *http.Request, n int) catalog.Key {
	vars := mux.Vars(r)
	k := make(catalog.Key, n)
	for i := range n {
		k[i] = vars[c.vars[i]]
	}
	return k
}

// decode reads and validates an object; urlName, when set, is authoritative
// and a different name in the body is rejected.
func (c crud[S]) decode(s *server, w http.ResponseWriter, r *http.Request, urlName string) (catalog.Object[S], error) {
	var obj catalog.Object[S]
	if err := s.decodeJSON(w, r, &obj); err != nil {
		return obj, err
	}
	if urlName != "" {
		if obj.Metadata.Name == "" {
			obj.Metadata.Name = urlName
		} else if obj.Metadata.Name != urlName {
			return obj, errdefs.Invalid("metadata.name %q does not match the name in the URL, %q", obj.Metadata.Name, urlName)
		}
	}
	if err := catalog.ValidateName(c.res.Kind().Name, obj.Metadata.Name); err != nil {
		return obj, err
	}
	if c.validate != nil {
		if err := c.validate(&obj); err != nil {
			return obj, err
		}
	}
	return obj, nil
}

func (c crud[S]) create(s *server, w http.ResponseWriter, r *http.Request) error {
	obj, err := c.decode(s, w, r, "")
	if err != nil {
		return err
	}
	key := append(c.key(r, len(c.vars)-1), obj.Metadata.Name)
	if err := c.res.Create(r.Context(), key, obj); err != nil {
		return err
	}
	writeJSON(w, http.StatusCreated, obj)
	return nil
}

func (c crud[S]) list(s *server, w http.ResponseWriter, r *http.Request) error {
	objs, err := c.res.List(r.Context(), c.key(r, len(c.vars)-1))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, objs)
	return nil
}

func (c crud[S]) get(s *server, w http.ResponseWriter, r *http.Request) error {
	obj, err := c.res.Get(r.Context(), c.key(r, len(c.vars)))
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, obj)
	return nil
}

func (c crud[S]) put(s *server, w http.ResponseWriter, r *http.Request) error {
	key := c.key(r, len(c.vars))
	obj, err := c.decode(s, w, r, key.Name())
	if err != nil {
		return err
	}
	created, err := c.res.Put(r.Context(), key, obj)
	if err != nil {
		return err
	}
	code := http.StatusOK
	if created {
		code = http.StatusCreated
	}
	writeJSON(w, code, obj)
	return nil
}

func (c crud[S]) delete(s *server, w http.ResponseWriter, r *http.Request) error {
	if err := c.res.Delete(r.Context(), c.key(r, len(c.vars))); err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}
