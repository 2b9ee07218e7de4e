package api

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"

	"github.com/argus-mc/argus/src/internal/errdefs"
)

// Body limits of SPEC section 9.
const (
	DefaultMaxJSONBody   = 1 << 20  // 1 MiB
	DefaultMaxUploadBody = 64 << 20 // 64 MiB
)

// decodeJSON reads one JSON value from the body, whatever its Content-Type
// (emcoctl and curl users send all sorts). Too large → 413; anything that is
// not exactly one JSON value → 422.
func (s *server) decodeJSON(w http.ResponseWriter, r *http.Request, v any) error {
	body := http.MaxBytesReader(w, r.Body, s.opts.MaxJSONBody)
	dec := json.NewDecoder(body)
	if err := dec.Decode(v); err != nil {
		var maxBytes *http.MaxBytesError
		if errors.As(err, &maxBytes) {
			return errdefs.TooLarge("request body is larger than %d bytes", maxBytes.Limit)
		}
		if errors.Is(err, io.EOF) {
			return errdefs.Unprocessable(nil, "request body is empty")
		}
		return errdefs.Unprocessable(err, "cannot decode request body")
	}
	// Exactly one value: trailing garbage means the client sent something else.
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		var maxBytes *http.MaxBytesError
		if errors.As(err, &maxBytes) {
			return errdefs.TooLarge("request body is larger than %d bytes", maxBytes.Limit)
		}
		return errdefs.Unprocessable(nil, "cannot decode request body: data after the JSON value")
	}
	return nil
}

// writeJSON answers with v as JSON.
func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	_ = enc.Encode(v) // the client went away; nothing useful to do
}
