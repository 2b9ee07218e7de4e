package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"

	"github.com/argus-mc/argus/src/internal/errdefs"
	"github.com/argus-mc/argus/src/internal/jsonlimit"
)

// Body limits of SPEC section 9, and the nesting a JSON body may have.
const (
	DefaultMaxJSONBody   = 1 << 20  // 1 MiB
	DefaultMaxUploadBody = 64 << 20 // 64 MiB
	DefaultMaxJSONDepth  = 64
	// maxUploadParts bounds the parts of a multipart upload: EMCO sends two.
	maxUploadParts = 8
)

// decodeJSON reads one JSON value from the body, whatever its Content-Type
// (emcoctl and curl users send all sorts). Too large → 413; nested deeper
// than MaxJSONDepth → 400; anything that is not exactly one JSON value →
// 422; a body trickled past the server's read timeout → 408.
func (s *server) decodeJSON(w http.ResponseWriter, r *http.Request, v any) error {
	release, err := s.reserveBody(w, r, s.opts.MaxJSONBody)
	if err != nil {
		return err
	}
	defer release()
	data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.opts.MaxJSONBody))
	if err != nil {
		return readError(err, "request body")
	}
	return s.unmarshal(data, v, "request body")
}

// unmarshal decodes data, which must be exactly one JSON value no deeper
// than MaxJSONDepth; what names the data in errors.
func (s *server) unmarshal(data []byte, v any, what string) error {
	if len(bytes.TrimSpace(data)) == 0 {
		return errdefs.Unprocessable(nil, "%s is empty", what)
	}
	// Before decoding: encoding/json recurses as deep as the input goes.
	if depth := jsonlimit.Depth(data, s.opts.MaxJSONDepth); depth > s.opts.MaxJSONDepth {
		return errdefs.Invalid("%s nests deeper than %d levels", what, s.opts.MaxJSONDepth)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(v); err != nil {
		return errdefs.Unprocessable(err, "cannot decode %s", what)
	}
	// Exactly one value: trailing garbage means the client sent something else.
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return errdefs.Unprocessable(nil, "cannot decode %s: data after the JSON value", what)
	}
	return nil
}

// readError classifies a failed body read: over the limit → 413, the
// server's read timeout → 408, anything else (the client went away, a
// malformed chunk) → 400.
func readError(err error, what string) error {
	var maxBytes *http.MaxBytesError
	var netErr net.Error
	switch {
	case errors.As(err, &maxBytes):
		return errdefs.TooLarge("%s is larger than %d bytes", what, maxBytes.Limit)
	case errors.Is(err, errBodyTooSlow):
		return errdefs.TimedOut(nil, "%s arrived slower than the server's minimum body rate", what)
	case errors.As(err, &netErr) && netErr.Timeout():
		return errdefs.TimedOut(nil, "%s did not arrive within the server's read timeout", what)
	default:
		return errdefs.Invalid("cannot read the %s: %v", what, err)
	}
}
