package frame

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// The kinds of frame.
const (
	KindOpen    byte = 1
	KindMessage byte = 2
	KindStatus  byte = 3
)

// MaxOpen bounds an open frame (a credential) and a status frame: both
// come before or after the stream, when nothing else bounds them.
const MaxOpen = 4 << 10

// headerLen is a frame's kind and length.
const headerLen = 5

// eagerAlloc is the most of a payload allocated before its bytes arrive.
const eagerAlloc = 64 << 10

// ErrInterrupted is a read or write refused because Interrupt was called.
var ErrInterrupted = errors.New("frame: the connection's stream was ended")

// Conn is a framed connection: one reader and any number of writers (a
// write sends one whole frame).
type Conn struct {
	c       net.Conn
	max     int // the largest payload read
	stopped atomic.Bool
	hdr     [headerLen]byte // the reader's

	wmu    sync.Mutex
	broken error // a frame was cut off: no later one can be written
}

// NewConn frames c, reading payloads of at most max bytes.
func NewConn(c net.Conn, max int) *Conn { return &Conn{c: c, max: max} }

// Interrupt ends the read or write in progress and refuses later ones,
// but for WriteFinal: the connection stays open for a last status. A
// write it cuts off leaves the connection unusable (TLS keeps a write's
// error, even one that wrote nothing), and WriteFinal then fails too: the
// status goes only when no write was in flight, as for an idle stream.
func (c *Conn) Interrupt() {
	c.stopped.Store(true)
	_ = c.c.SetDeadline(time.Unix(1, 0))
}

// Close closes the connection.
func (c *Conn) Close() error { return c.c.Close() }

// lingerBytes bounds what CloseLinger reads and drops.
const lingerBytes = 1 << 20

// CloseLinger closes the connection after the last frame written has had
// linger to reach the peer: it ends any read, closes the writing side
// (TLS close_notify) and drops what the peer still sends until it closes
// too, or linger is up. Closed at once with unread bytes, a TCP connection
// is reset, and the peer may lose the frames not yet acknowledged — a
// stream's status. With linger 0, or after a failed write (nothing more
// can reach the peer), it closes at once, without close_notify.
func (c *Conn) CloseLinger(linger time.Duration) error {
	c.Interrupt()
	c.wmu.Lock()
	broken := c.broken
	c.wmu.Unlock()
	if linger <= 0 || broken != nil {
		return c.closeRaw()
	}
	// Whatever else reads or writes (a reader that reset its deadline, a
	// close_notify to a peer that reads nothing), this ends it in time.
	done := make(chan struct{})
	t := time.AfterFunc(linger, func() {
		defer close(done)
		_ = c.closeRaw()
	})
	c.wmu.Lock()
	if cw, ok := c.c.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
	}
	c.wmu.Unlock()
	if err := c.c.SetReadDeadline(time.Now().Add(linger)); err == nil {
		_, _ = io.Copy(io.Discard, io.LimitReader(c.c, lingerBytes))
	}
	if !t.Stop() {
		<-done
	}
	return c.c.Close()
}

// closeRaw closes the connection under TLS, if any, without close_notify.
func (c *Conn) closeRaw() error {
	if nc, ok := c.c.(interface{ NetConn() net.Conn }); ok {
		return nc.NetConn().Close()
	}
	return c.c.Close()
}

// RemoteAddr is the peer's address.
func (c *Conn) RemoteAddr() net.Addr { return c.c.RemoteAddr() }

// Read returns the next frame. timeout bounds silence, not the frame: it
// fails once no byte came for that long, so a large message on a slow
// link takes the time it needs.
func (c *Conn) Read(timeout time.Duration) (kind byte, payload []byte, err error) {
	return c.read(timeout, time.Time{}, 0)
}

// read reads a frame, of kind want unless it is 0; nothing arriving for
// silence, or by (if set) the whole frame not in, fails it. The kind and
// length are checked from the header, before anything is allocated.
func (c *Conn) read(silence time.Duration, by time.Time, want byte) (kind byte, payload []byte, err error) {
	if err := c.readFull(c.hdr[:], silence, by); err != nil {
		return 0, nil, err
	}
	kind, n := c.hdr[0], binary.BigEndian.Uint32(c.hdr[1:])
	if want != 0 && kind != want {
		return 0, nil, status.Errorf(codes.InvalidArgument, "frame: a frame of kind %d where one of kind %d was due", kind, want)
	}
	limit := uint32(c.max)
	if kind != KindMessage {
		limit = MaxOpen
	}
	if n > limit {
		return 0, nil, status.Errorf(codes.ResourceExhausted, "frame: a frame of %d bytes, more than the %d allowed", n, limit)
	}
	// Allocated as the bytes arrive beyond eagerAlloc: a header alone
	// does not make this side hold a whole message's memory.
	payload = make([]byte, 0, min(int(n), eagerAlloc))
	for len(payload) < int(n) {
		chunk := min(int(n)-len(payload), eagerAlloc)
		payload = slices.Grow(payload, chunk)
		if err := c.readFull(payload[len(payload):len(payload)+chunk], silence, by); err != nil {
			return 0, nil, err
		}
		payload = payload[:len(payload)+chunk]
	}
	return kind, payload, nil
}

// readFull fills p, failing once nothing arrived for silence, or at by.
func (c *Conn) readFull(p []byte, silence time.Duration, by time.Time) error {
	for n := 0; n < len(p); {
		d := time.Now().Add(silence)
		if !by.IsZero() && by.Before(d) {
			d = by
		}
		// The deadline first, then the flag: an Interrupt between them has
		// set its past deadline after this one, or is seen here.
		if err := c.c.SetReadDeadline(d); err != nil {
			return err
		}
		if c.stopped.Load() {
			return ErrInterrupted
		}
		m, err := c.c.Read(p[n:])
		n += m
		if err != nil {
			if c.stopped.Load() {
				return ErrInterrupted
			}
			if err == io.EOF && n > 0 {
				err = io.ErrUnexpectedEOF
			}
			return err
		}
	}
	return nil
}

// ReadMessage reads a message frame into m.
func (c *Conn) ReadMessage(m proto.Message, timeout time.Duration) error {
	kind, p, err := c.Read(timeout)
	if err != nil {
		return err
	}
	return decodeMessage(kind, p, m)
}

// decodeMessage decodes a message frame read from an agent.
func decodeMessage(kind byte, p []byte, m proto.Message) error {
	if kind != KindMessage {
		return status.Errorf(codes.InvalidArgument, "frame: a frame of kind %d where a message was due", kind)
	}
	return unmarshal(p, m, codes.InvalidArgument)
}

// WriteMessage sends m; timeout bounds a write that makes no progress.
func (c *Conn) WriteMessage(m proto.Message, timeout time.Duration) error {
	b, err := Append(nil, KindMessage, m)
	if err != nil {
		return err
	}
	return c.write(b, timeout, false)
}

// WriteFinal sends a last frame, even after Interrupt.
func (c *Conn) WriteFinal(kind byte, m proto.Message, timeout time.Duration) error {
	b, err := Append(nil, kind, m)
	if err != nil {
		return err
	}
	return c.write(b, timeout, true)
}

// writeChunk is how much of a frame is written under one deadline.
const writeChunk = 16 << 10

// write sends the frame b; timeout (0: none) bounds a write that makes
// no progress, not the frame. A failed write (an Interrupt, a timeout)
// breaks the connection for every later frame: a frame cut off midway
// hides the next one's start, and TLS keeps a write's error anyway.
func (c *Conn) write(b []byte, timeout time.Duration, final bool) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.broken != nil {
		return c.broken
	}
	for n := 0; n < len(b); {
		var d time.Time // none: only Interrupt ends the write
		if timeout > 0 {
			d = time.Now().Add(timeout)
		}
		if err := c.c.SetWriteDeadline(d); err != nil {
			return err
		}
		if c.stopped.Load() && (!final || n > 0) {
			if n > 0 {
				c.broken = ErrInterrupted
			}
			return ErrInterrupted
		}
		m, err := c.c.Write(b[n:min(len(b), n+writeChunk)])
		n += m
		if err != nil {
			if c.stopped.Load() {
				err = ErrInterrupted
			}
			c.broken = err // TLS refuses every write after a failed one
			return err
		}
	}
	return nil
}

// Append appends m as a frame of kind to b.
func Append(b []byte, kind byte, m proto.Message) ([]byte, error) {
	start := len(b)
	b = append(b, kind, 0, 0, 0, 0)
	b, err := proto.MarshalOptions{}.MarshalAppend(b, m)
	if err != nil {
		return nil, fmt.Errorf("frame: encode: %w", err)
	}
	binary.BigEndian.PutUint32(b[start+1:], uint32(len(b)-start-headerLen))
	return b, nil
}

// AppendRaw appends payload as a frame of kind to b.
func AppendRaw(b []byte, kind byte, payload []byte) []byte {
	b = append(b, kind)
	b = binary.BigEndian.AppendUint32(b, uint32(len(payload)))
	return append(b, payload...)
}

// WriteOpen sends the open frame: the agent's credential.
func (c *Conn) WriteOpen(credential string, timeout time.Duration) error {
	if len(credential) > MaxOpen {
		return fmt.Errorf("frame: a credential of %d bytes, more than %d", len(credential), MaxOpen)
	}
	return c.write(AppendRaw(nil, KindOpen, []byte(credential)), timeout, false)
}

// ReadOpen reads the open frame, which must come first, whole within
// timeout: a peer not yet authenticated cannot hold the connection by
// trickling it.
func (c *Conn) ReadOpen(timeout time.Duration) (string, error) {
	_, p, err := c.read(timeout, time.Now().Add(timeout), KindOpen)
	if err != nil {
		return "", err
	}
	return string(p), nil
}

// unmarshal decodes a frame's payload; a malformed one is an error of
// code (the agent's: InvalidArgument, a refusal; the hub's: Internal).
func unmarshal(p []byte, m proto.Message, code codes.Code) error {
	if err := proto.Unmarshal(p, m); err != nil {
		return status.Errorf(code, "frame: malformed frame from the peer: %v", err)
	}
	return nil
}
