package api

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"slices"
	"strconv"

	"github.com/gorilla/mux"

	"github.com/argus-mc/argus/src/internal/catalog"
	"github.com/argus-mc/argus/src/internal/errdefs"
)

// crud serves the EMCO collection conventions for one catalogue kind:
// POST/GET on the collection, GET/PUT/DELETE on the item.
type crud[S any] struct {
	res *catalog.Resource[S]
	// collection and item are full path templates, e.g.
	// "/v2/projects/{project}/composite-apps" and ".../{compositeApp}/{version}".
	collection, item string
	// parentVars name the route variables of the parent key, outermost first;
	// itemVars those the item path adds.
	parentVars, itemVars []string
	// ownKey derives the item's own key from a decoded object; nil means
	// [metadata.name].
	ownKey func(*catalog.Object[S]) []string
	// validate checks a spec beyond its name; nil accepts any.
	validate func(*catalog.Object[S]) error
	// upload, when set, makes POST multipart/form-data with the object in
	// part "metadata" and a file in part "file", checked by upload.
	upload func(ctx context.Context, file []byte) error
	// beforeDelete may refuse a delete (an instantiated DIG); it runs once
	// the object is marked as being deleted, so nothing can be created under
	// it meanwhile. abortDelete undoes it when the delete fails after it.
	// afterDelete cleans up what hangs off the object.
	beforeDelete, abortDelete, afterDelete func(ctx context.Context, key catalog.Key) error
	// noPut leaves PUT out (uploads are replaced by delete and create).
	noPut bool
	// files, when set, makes POST and PUT multipart/form-data: part
	// "metadata" holds the object, the parts named in fileParts its files,
	// which files checks and turns into the stored content.
	files     func(obj *catalog.Object[S], files []catalog.File) ([]byte, error)
	fileParts []string
	// beforeWrite may refuse a create or replace of the object at key;
	// afterWrite acts on a replace once it is stored (a DIG's sync policy
	// takes effect at once).
	beforeWrite, afterWrite func(ctx context.Context, key catalog.Key, obj *catalog.Object[S]) error
	// view, when set, answers an item's GET instead of the object (a
	// kv-pair's ?key= query).
	view func(r *http.Request, obj catalog.Object[S]) (any, error)
	// maxFile bounds the bytes of an upload's files together, read as they
	// arrive: a file over it is refused before it is held; 0 means
	// MaxUploadBody.
	maxFile int64
	// checkSpec checks a created object's spec as sent, before anything
	// else of the request: fields the stored spec type drops (a cluster's
	// spec.gitOps) can be refused rather than ignored.
	checkSpec func(raw json.RawMessage) error
	// afterCreate runs once a POST or PUT created the object (a DIG's
	// Created action); its failure is logged, the object stays.
	afterCreate func(ctx context.Context, key catalog.Key) error
	// listView, when set, may answer a collection GET instead of the
	// list (clusters ?label=); it reports whether it did.
	listView func(r *http.Request) (any, bool, error)
	// createJSON, when set with upload, serves a POST that is not a
	// multipart upload (a cluster in pull mode has no kubeconfig).
	createJSON handlerFunc
}

// specPeek decodes an object and keeps its spec as sent.
type specPeek[S any] struct {
	obj  *catalog.Object[S]
	spec json.RawMessage
}

func (p *specPeek[S]) UnmarshalJSON(b []byte) error {
	var raw struct {
		Spec json.RawMessage `json:"spec"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		return err
	}
	p.spec = raw.Spec
	return json.Unmarshal(b, p.obj)
}

func registerCRUD[S any](r *mux.Router, s *server, c crud[S]) {
	if c.ownKey == nil {
		c.ownKey = func(o *catalog.Object[S]) []string { return []string{o.Metadata.Name} }
	}
	r.HandleFunc(c.collection, s.handle(c.create)).Methods(http.MethodPost)
	r.HandleFunc(c.collection, s.handle(c.list)).Methods(http.MethodGet)
	r.HandleFunc(c.item, s.handle(c.get)).Methods(http.MethodGet)
	if !c.noPut {
		r.HandleFunc(c.item, s.handle(c.put)).Methods(http.MethodPut)
	}
	r.HandleFunc(c.item, s.handle(c.delete)).Methods(http.MethodDelete)
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

func varsKey(r *http.Request, names ...[]string) catalog.Key {
	vars := mux.Vars(r)
	var k catalog.Key
	for _, ns := range names {
		for _, n := range ns {
			k = append(k, vars[n])
		}
	}
	return k
}

// check validates names and the spec. urlKey, when set, is the item's own
// key from the URL, which is authoritative: an empty body name takes it, a
// different one is refused.
func (c crud[S]) check(obj *catalog.Object[S], urlKey []string) error {
	if urlKey != nil {
		if obj.Metadata.Name == "" {
			obj.Metadata.Name = urlKey[0]
		}
		if own := c.ownKey(obj); len(own) > 0 && own[0] != urlKey[0] {
			return errdefs.Invalid("metadata.name %q does not match the name in the URL, %q", own[0], urlKey[0])
		}
	}
	if err := catalog.ValidateName(c.res.Kind().Name, obj.Metadata.Name); err != nil {
		return err
	}
	if c.validate != nil {
		if err := c.validate(obj); err != nil {
			return err
		}
	}
	for _, part := range c.ownKey(obj)[1:] {
		if err := catalog.ValidateName(c.res.Kind().Name+" key", part); err != nil {
			return err
		}
	}
	return nil
}

func (c crud[S]) create(s *server, w http.ResponseWriter, r *http.Request) error {
	if c.createJSON != nil {
		if mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); mt != "multipart/form-data" {
			return c.createJSON(s, w, r)
		}
	}
	if c.files != nil {
		return c.writeWithFiles(s, w, r, false)
	}
	var obj catalog.Object[S]
	var file []byte
	var target any = &obj
	peek := &specPeek[S]{obj: &obj}
	if c.checkSpec != nil {
		target = peek
	}
	var err error
	if c.upload != nil {
		file, err = s.decodeMultipart(w, r, target, c.maxFile)
	} else {
		err = s.decodeJSON(w, r, target)
	}
	if c.checkSpec != nil && len(peek.spec) > 0 {
		if cerr := c.checkSpec(peek.spec); cerr != nil {
			return cerr // what the object is decides before what the upload lacks
		}
	}
	if err != nil {
		return err
	}
	if err := c.check(&obj, nil); err != nil {
		return err
	}
	if c.upload != nil {
		if err := c.upload(r.Context(), file); err != nil {
			return err
		}
	}
	key := append(varsKey(r, c.parentVars), c.ownKey(&obj)...)
	if c.beforeWrite != nil {
		if err := c.beforeWrite(r.Context(), key, &obj); err != nil {
			return err
		}
	}
	create := c.res.Create
	if c.upload != nil { // the object and its file, as one step
		create = func(ctx context.Context, key catalog.Key, obj catalog.Object[S]) error {
			return c.res.CreateWithContent(ctx, key, obj, file)
		}
	}
	if err := create(r.Context(), key, obj); err != nil {
		return err
	}
	c.created(r, key)
	writeJSON(w, http.StatusCreated, obj)
	return nil
}

// created runs afterCreate for a new object.
func (c crud[S]) created(r *http.Request, key catalog.Key) {
	if c.afterCreate == nil {
		return
	}
	if err := c.afterCreate(r.Context(), key); err != nil {
		loggerFrom(r.Context()).WithError(err).WithField("key", key).Warn("created, but what follows a create failed")
	}
}

// list answers a collection GET, a page at a time: ?limit= (1 to
// MaxListPageSize; ListPageSize by default) and ?continue= (the token the
// previous page's Link header carries), a page also cut short past
// listPageBytes. A list that fits one page is answered whole, as EMCO
// does.
func (c crud[S]) list(s *server, w http.ResponseWriter, r *http.Request) error {
	if c.listView != nil {
		v, ok, err := c.listView(r)
		if err != nil {
			return err
		}
		if ok {
			writeJSON(w, http.StatusOK, v)
			return nil
		}
	}
	limit, cont, err := s.pageParams(r)
	if err != nil {
		return err
	}
	page, err := c.res.ListPageBytes(r.Context(), varsKey(r, c.parentVars), cont, limit, s.listPageBytes())
	if err != nil {
		return err
	}
	setNextLink(w, r, limit, page.Continue)
	writeJSON(w, http.StatusOK, page.Items)
	return nil
}

func (c crud[S]) get(s *server, w http.ResponseWriter, r *http.Request) error {
	obj, err := c.res.Get(r.Context(), varsKey(r, c.parentVars, c.itemVars))
	if err != nil {
		return err
	}
	if c.view != nil {
		v, err := c.view(r, obj)
		if err != nil {
			return err
		}
		writeJSON(w, http.StatusOK, v)
		return nil
	}
	writeJSON(w, http.StatusOK, obj)
	return nil
}

func (c crud[S]) put(s *server, w http.ResponseWriter, r *http.Request) error {
	if c.files != nil {
		return c.writeWithFiles(s, w, r, true)
	}
	key := varsKey(r, c.parentVars, c.itemVars)
	var obj catalog.Object[S]
	if err := s.decodeJSON(w, r, &obj); err != nil {
		return err
	}
	own := key[len(key)-len(c.itemVars):]
	if err := c.check(&obj, own); err != nil {
		return err
	}
	if got := c.ownKey(&obj); len(got) > 1 && got[1] != own[1] {
		return errdefs.Invalid("the body's %s %q does not match the URL's %q", c.res.Kind().OwnFields()[1], got[1], own[1])
	}
	if c.beforeWrite != nil {
		if err := c.beforeWrite(r.Context(), key, &obj); err != nil {
			return err
		}
	}
	created, err := c.res.Put(r.Context(), key, obj)
	switch {
	case err == nil && created:
		c.created(r, key)
	case err == nil && c.afterWrite != nil:
		err = c.afterWrite(r.Context(), key, &obj)
	}
	return putAnswer(w, obj, created, err)
}

// putAnswer answers a PUT: 201 when it created the object, 200 when it
// replaced one.
func putAnswer(w http.ResponseWriter, v any, created bool, err error) error {
	if err != nil {
		return err
	}
	code := http.StatusOK
	if created {
		code = http.StatusCreated
	}
	writeJSON(w, code, v)
	return nil
}

func (c crud[S]) delete(s *server, w http.ResponseWriter, r *http.Request) error {
	key := varsKey(r, c.parentVars, c.itemVars)
	var before []func(context.Context) error
	passed := false
	if c.beforeDelete != nil {
		before = append(before, func(ctx context.Context) error {
			err := c.beforeDelete(ctx, key)
			passed = err == nil
			return err
		})
	}
	if err := c.res.Delete(r.Context(), key, before...); err != nil {
		if passed && c.abortDelete != nil {
			err = errors.Join(err, c.abortDelete(context.WithoutCancel(r.Context()), key))
		}
		return err
	}
	if c.afterDelete != nil {
		if err := c.afterDelete(r.Context(), key); err != nil {
			return err
		}
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// decodeMultipart reads an EMCO upload: part "metadata" (JSON) into v and
// part "file" of at most maxFile bytes (0: MaxUploadBody), returned.
func (s *server) decodeMultipart(w http.ResponseWriter, r *http.Request, v any, maxFile int64) ([]byte, error) {
	files, err := s.decodeParts(w, r, v, []string{"file"}, 1, maxFile)
	if err != nil {
		return nil, err
	}
	if len(files) == 0 || len(files[0].Content) == 0 {
		return nil, errdefs.Invalid("the upload has no \"file\" part")
	}
	return files[0].Content, nil
}

// decodeParts reads a multipart upload: part "metadata" (JSON) into v and,
// in order, up to maxFiles parts whose form name is in fileParts, each with
// its file name. Parts are streamed, each under its own limit — the
// metadata as a JSON body, the files together under maxFile (0:
// MaxUploadBody) — and the whole body under MaxUploadBody; other parts are
// skipped unread past their limit. What it holds is reserved from the
// upload memory budget first.
func (s *server) decodeParts(w http.ResponseWriter, r *http.Request, v any, fileParts []string, maxFiles int, maxFile int64) ([]catalog.File, error) {
	mediaType, params, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil || mediaType != "multipart/form-data" || params["boundary"] == "" {
		return nil, errdefs.Invalid("expected a multipart/form-data upload with part \"metadata\" and file parts %q", fileParts)
	}
	if maxFile <= 0 || maxFile > s.opts.MaxUploadBody {
		maxFile = s.opts.MaxUploadBody
	}
	release, err := s.reserveBody(w, r, maxFile+s.opts.MaxJSONBody)
	if err != nil {
		return nil, err
	}
	defer release()
	mr := multipart.NewReader(http.MaxBytesReader(w, r.Body, s.opts.MaxUploadBody), params["boundary"])
	var held int64 // bytes of files kept so far
	var meta []byte
	var files []catalog.File
	for n := 0; ; n++ {
		part, err := mr.NextPart()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, readError(err, "upload")
		}
		if n == maxUploadParts+maxFiles-1 { // EMCO sends metadata and its files
			return nil, errdefs.Invalid("the upload has more than %d parts", n)
		}
		name := part.FormName()
		isFile := slices.Contains(fileParts, name)
		switch {
		case name == "metadata" && meta != nil:
			return nil, errdefs.Invalid("the upload has more than one \"metadata\" part")
		case isFile && len(files) == maxFiles && maxFiles == 1:
			return nil, errdefs.Invalid("the upload has more than one %q part", name)
		case isFile && len(files) == maxFiles:
			return nil, errdefs.TooLarge("an upload may hold at most %d files", maxFiles)
		}
		limit := s.opts.MaxJSONBody
		if isFile {
			limit = maxFile - held
		}
		data, err := readPart(part, limit, isFile || name == "metadata")
		if err != nil {
			if isFile && held > 0 && errors.Is(err, errdefs.ErrTooLarge) {
				return nil, errdefs.TooLarge("the upload's files hold more than %d bytes together", maxFile)
			}
			return nil, err
		}
		if isFile {
			held += int64(len(data))
		}
		switch {
		case name == "metadata":
			meta = data
		case isFile:
			fn := part.FileName()
			if fn == "" {
				fn = name
			}
			files = append(files, catalog.File{Name: fn, Content: data})
		}
	}
	if meta == nil {
		return nil, errdefs.Invalid("the upload has no \"metadata\" part")
	}
	if err := s.unmarshal(meta, v, "the \"metadata\" part"); err != nil {
		return nil, err
	}
	return files, nil
}

// readPart reads (keep) or skips one part of at most limit bytes.
func readPart(part *multipart.Part, limit int64, keep bool) ([]byte, error) {
	what := "the upload's \"" + part.FormName() + "\" part"
	if part.FormName() == "" {
		what = "an unnamed part of the upload"
	}
	src := io.LimitReader(part, limit+1)
	if !keep {
		n, err := io.Copy(io.Discard, src)
		if err != nil {
			return nil, readError(err, "upload")
		}
		if n > limit {
			return nil, errdefs.TooLarge("%s is larger than %d bytes", what, limit)
		}
		return nil, nil
	}
	data, err := io.ReadAll(src)
	if err != nil {
		return nil, readError(err, "upload")
	}
	if int64(len(data)) > limit {
		return nil, errdefs.TooLarge("%s is larger than %d bytes", what, limit)
	}
	if data == nil {
		data = []byte{} // present, if empty
	}
	return data, nil
}

// listPageBytes bounds the stored documents of one list page: a page of
// a thousand objects of the largest size was read, decoded and encoded
// whole (a gigabyte and more) before the answer budget could refuse it.
// The page is cut short instead, its Link naming the rest.
func (s *server) listPageBytes() int {
	return int(max(min(8<<20, s.opts.MaxAnswerMemory/8), 64<<10))
}

// MaxListPageSize bounds ?limit= on lists.
const MaxListPageSize = 10000

// pageParams reads a list's ?limit= and ?continue=.
func (s *server) pageParams(r *http.Request) (int, string, error) {
	q := r.URL.Query()
	limit := s.opts.ListPageSize
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > MaxListPageSize {
			return 0, "", errdefs.Invalid("limit %q is not a number from 1 to %d", v, MaxListPageSize)
		}
		limit = n
	}
	return limit, q.Get("continue"), nil
}

// setNextLink points at the next page, if there is one (RFC 8288).
func setNextLink(w http.ResponseWriter, r *http.Request, limit int, cont string) {
	if cont == "" {
		return
	}
	q := r.URL.Query()
	q.Set("limit", strconv.Itoa(limit))
	q.Set("continue", cont)
	w.Header().Set("Link", "<"+r.URL.Path+"?"+q.Encode()+`>; rel="next"`)
}
