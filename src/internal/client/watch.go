package client

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/argus-mc/argus/src/internal/backoff"
)

// MaxEvent bounds one Server-Sent Event (a status snapshot of a big fleet).
const MaxEvent = 32 << 20

// Event is one Server-Sent Event of a status stream: snapshot, change,
// history or error, with its id (0 for none) and its JSON data.
type Event struct {
	ID   int64
	Name string
	Data []byte
}

// Reconnected is handed to a Watch handler (as an Event named
// "reconnected") when a broken stream is open again; its snapshot follows.
const Reconnected = "reconnected"

// Watch follows GET …/status?watch=true with the query q, calling handle
// with each event, until ctx ends (nil) or handle returns an error (that
// error). A broken stream is opened again, with backoff, resuming after
// the last event id; the server then sends a fresh snapshot. An answer
// that retrying cannot change (404 for an unknown subject, 400, 401, 403)
// ends it with an *APIError.
func (c *Client) Watch(ctx context.Context, ref Ref, q url.Values, handle func(Event) error) error {
	q = cloneValues(q)
	q.Set("watch", "true")
	path := ref.Path() + "/status"
	retry := backoff.Backoff{Base: 500 * time.Millisecond, Max: 10 * time.Second, Jitter: 0.2}
	var last int64
	for n := 0; ; n++ {
		if n > 0 {
			if err := handle(Event{Name: Reconnected}); err != nil {
				return err
			}
		}
		err := c.stream(ctx, path, q, &last, func(e Event) error {
			retry.Reset()
			return handle(e)
		})
		var handled handlerError
		switch {
		case ctx.Err() != nil:
			return nil
		case errors.As(err, &handled):
			return handled.err
		case final(err):
			return err
		}
		if !retry.Wait(ctx) {
			return nil
		}
	}
}

// handlerError carries a handler's error out of a stream.
type handlerError struct{ err error }

func (h handlerError) Error() string { return h.err.Error() }

// final reports an answer a retry would get again.
func final(err error) bool {
	var e *APIError
	if !errors.As(err, &e) {
		return false
	}
	switch e.Code {
	case http.StatusRequestTimeout, http.StatusTooManyRequests:
		return false
	}
	return e.Code >= 400 && e.Code < 500
}

// stream reads one connection's events.
func (c *Client) stream(ctx context.Context, path string, q url.Values, last *int64, handle func(Event) error) error {
	req, err := c.request(ctx, http.MethodGet, path, q, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", "text/event-stream")
	if *last > 0 {
		req.Header.Set("Last-Event-ID", strconv.FormatInt(*last, 10))
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("GET %s: %w", path, err)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		data, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return &APIError{Method: http.MethodGet, Path: path, Code: resp.StatusCode, Message: firstLine(data)}
	}
	return readEvents(resp.Body, func(e Event) error {
		if e.ID > 0 {
			*last = e.ID
		}
		if err := handle(e); err != nil {
			return handlerError{err}
		}
		return nil
	})
}

// readEvents parses a text/event-stream body (comments and unknown fields
// ignored, events over MaxEvent refused) until it ends.
func readEvents(r io.Reader, handle func(Event) error) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), MaxEvent)
	var e Event
	var data bytes.Buffer
	for sc.Scan() {
		line := sc.Bytes()
		if len(line) == 0 {
			if data.Len() > 0 {
				if e.Name == "" {
					e.Name = "message"
				}
				e.Data = bytes.Clone(data.Bytes())
				if err := handle(e); err != nil {
					return err
				}
			}
			e, data = Event{}, bytes.Buffer{}
			continue
		}
		if line[0] == ':' {
			continue // a heartbeat
		}
		field, value, _ := bytes.Cut(line, []byte(":"))
		value = bytes.TrimPrefix(value, []byte(" "))
		switch string(field) {
		case "event":
			e.Name = string(value)
		case "id":
			e.ID, _ = strconv.ParseInt(string(value), 10, 64)
		case "data":
			if data.Len() > 0 {
				data.WriteByte('\n')
			}
			if data.Len()+len(value) > MaxEvent {
				return fmt.Errorf("an event is larger than %d bytes", MaxEvent)
			}
			data.Write(value)
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("read the stream: %w", err)
	}
	return io.ErrUnexpectedEOF // the server ended the stream
}

func cloneValues(q url.Values) url.Values {
	out := url.Values{}
	for k, v := range q {
		out[k] = append([]string(nil), v...)
	}
	return out
}
