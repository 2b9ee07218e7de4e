package api

import (
	"encoding/json"
	"errors"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"slices"

	"github.com/argus-mc/argus/src/internal/catalog"
	"github.com/argus-mc/argus/src/internal/errdefs"
)

// maxUploadFiles bounds the files of one multi-file upload.
const maxUploadFiles = 64

// decodeFiles reads an EMCO upload whose files are optional and may be
// many (GAC resources send part "file", customizations parts "files"):
// part "metadata" (JSON) into v, and each part named in names with its
// file name. The whole upload is bounded by MaxUploadBody.
func (s *server) decodeFiles(w http.ResponseWriter, r *http.Request, v any, names []string) ([]catalog.File, error) {
	mediaType, params, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil || mediaType != "multipart/form-data" || params["boundary"] == "" {
		return nil, errdefs.Invalid("expected a multipart/form-data upload with part \"metadata\"")
	}
	mr := multipart.NewReader(http.MaxBytesReader(w, r.Body, s.opts.MaxUploadBody), params["boundary"])
	var meta []byte
	var files []catalog.File
	for {
		part, err := mr.NextPart()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, uploadError(err)
		}
		data, err := io.ReadAll(part)
		if err != nil {
			return nil, uploadError(err)
		}
		switch name := part.FormName(); {
		case name == "metadata":
			meta = data
		case slices.Contains(names, name):
			if len(files) == maxUploadFiles {
				return nil, errdefs.TooLarge("an upload may hold at most %d files", maxUploadFiles)
			}
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
	if err := json.Unmarshal(meta, v); err != nil {
		return nil, errdefs.Unprocessable(err, "cannot decode the \"metadata\" part")
	}
	return files, nil
}

// writeWithFiles creates (POST) or replaces (PUT) an object sent with its
// files; the files become its stored content.
func (c crud[S]) writeWithFiles(s *server, w http.ResponseWriter, r *http.Request, replace bool) error {
	var obj catalog.Object[S]
	files, err := s.decodeFiles(w, r, &obj, c.fileParts)
	if err != nil {
		return err
	}
	var urlKey []string
	if replace {
		k := varsKey(r, c.itemVars)
		urlKey = k
	}
	if err := c.check(&obj, urlKey); err != nil {
		return err
	}
	content, err := c.files(&obj, files)
	if err != nil {
		return err
	}
	key := append(varsKey(r, c.parentVars), c.ownKey(&obj)...)
	if c.beforeWrite != nil {
		if err := c.beforeWrite(r.Context(), key, &obj); err != nil {
			return err
		}
	}
	created := true
	if replace {
		if created, err = c.res.Put(r.Context(), key, obj); err != nil {
			return err
		}
	} else if err := c.res.Create(r.Context(), key, obj); err != nil {
		return err
	}
	if content == nil {
		content = []byte{}
	}
	if err := c.res.PutContent(r.Context(), key, content); err != nil {
		return err
	}
	if replace {
		return putAnswer(w, obj, created, nil)
	}
	writeJSON(w, http.StatusCreated, obj)
	return nil
}

// encodeFiles is the stored content of a multi-file upload.
func encodeFiles(files []catalog.File) ([]byte, error) {
	if len(files) == 0 {
		return nil, nil
	}
	return json.Marshal(files)
}

func sortStrings(s []string) []string {
	slices.Sort(s)
	return s
}
