package api

import (
	"encoding/json"
	"net/http"
	"slices"

	"github.com/argus-mc/argus/src/internal/catalog"
)

// maxUploadFiles bounds the files of one multi-file upload.
const maxUploadFiles = 64

// writeWithFiles creates (POST) or replaces (PUT) an object sent with its
// files; the files become its stored content.
func (c crud[S]) writeWithFiles(s *server, w http.ResponseWriter, r *http.Request, replace bool) error {
	var obj catalog.Object[S]
	files, err := s.decodeParts(w, r, &obj, c.fileParts, maxUploadFiles, c.maxFile)
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
	if content == nil {
		content = []byte{}
	}
	created := true
	if replace {
		if created, err = c.res.Put(r.Context(), key, obj); err != nil {
			return err
		}
		if err := c.res.PutContent(r.Context(), key, content); err != nil {
			return err
		}
	} else if err := c.res.CreateWithContent(r.Context(), key, obj, content); err != nil { // one step
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
