package api

import (
	"bytes"
	"context"
	"errors"
	"net/http"

	"github.com/argus-mc/argus/src/internal/archive"
	"github.com/argus-mc/argus/src/internal/errdefs"
)

// Every chart and profile an upload carries is inspected here first, as a
// stream with the archive limits: a bomb is refused after a few kilobytes
// of work and never reaches Helm. Only then does Archives load it fully.

func (s *server) checkChart(ctx context.Context, data []byte) error {
	_, err := s.checkChartNamed(ctx, data, "")
	return err
}

// checkChartNamed checks a chart archive (chartName picks one of several)
// and returns the chart's name.
func (s *server) checkChartNamed(ctx context.Context, data []byte, chartName string) (string, error) {
	if _, err := archive.Inspect(bytes.NewReader(data), s.opts.ArchiveLimits, nil); err != nil {
		return "", err
	}
	return s.opts.Archives.CheckChart(ctx, data, chartName)
}

func (s *server) checkProfile(ctx context.Context, data []byte) error {
	if _, err := archive.Inspect(bytes.NewReader(data), s.opts.ArchiveLimits, nil); err != nil {
		return err
	}
	return s.opts.Archives.CheckProfile(ctx, data)
}

// archiveMax is the largest archive accepted.
func (s *server) archiveMax() int64 {
	if m := s.opts.ArchiveLimits.WithDefaults().MaxCompressed; m > 0 {
		return m
	}
	return s.opts.MaxUploadBody
}

// readUpload reads a raw request body of at most limit bytes into a buffer
// sized from Content-Length when the client sent one, so a large upload is
// held once rather than grown by copying.
func readUpload(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, error) {
	body := http.MaxBytesReader(w, r.Body, limit)
	var buf bytes.Buffer
	if n := r.ContentLength; n > 0 && n <= limit {
		buf.Grow(int(n) + bytes.MinRead)
	}
	if _, err := buf.ReadFrom(body); err != nil {
		var maxBytes *http.MaxBytesError
		if errors.As(err, &maxBytes) {
			return nil, errdefs.TooLarge("archive is larger than %d bytes", maxBytes.Limit)
		}
		return nil, readError(err, "upload")
	}
	return buf.Bytes(), nil
}
