package frame

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
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

// eagerAlloc is the largest payload allocated at once as its header
// announces; a larger one grows as its bytes arrive, so a peer cannot make
// the other side hold a whole message's memory by sending a header.
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
	wmu     sync.Mutex
}

// NewConn frames c, reading payloads of at most max bytes.
func NewConn(c net.Conn, max int) *Conn { return &Conn{c: c, max: max} }

// Interrupt ends the read or write in progress and refuses later ones,
// but for WriteFinal: the connection stays open for a last status. A
// write cut off midway leaves the connection unusable (TLS keeps the
// error), and WriteFinal then fails too.
func (c *Conn) Interrupt() {
	c.stopped.Store(true)
	_ = c.c.SetDeadline(time.Unix(1, 0))
}

// Close closes the connection.
func (c *Conn) Close() error { return c.c.Close() }

// RemoteAddr is the peer's address.
func (c *Conn) RemoteAddr() net.Addr { return c.c.RemoteAddr() }

// Read returns the next frame, which must arrive within timeout.
func (c *Conn) Read(timeout time.Duration) (kind byte, payload []byte, err error) {
	// The deadline first, then the flag: an Interrupt between them has
	// set its past deadline after this one, or is seen here.
	if err := c.c.SetReadDeadline(time.Now().Add(timeout)); err != nil {
		return 0, nil, err
	}
	if c.stopped.Load() {
		return 0, nil, ErrInterrupted
	}
	if _, err := io.ReadFull(c.c, c.hdr[:]); err != nil {
		return 0, nil, c.readErr(err)
	}
	kind, n := c.hdr[0], binary.BigEndian.Uint32(c.hdr[1:])
	if n > uint32(c.max) || (kind != KindMessage && n > MaxOpen) {
		return 0, nil, status.Errorf(codes.ResourceExhausted, "frame: a frame of %d bytes, more than the %d allowed", n, c.max)
	}
	if n <= eagerAlloc {
		payload = make([]byte, n)
		_, err = io.ReadFull(c.c, payload)
	} else {
		var b bytes.Buffer
		b.Grow(eagerAlloc)
		_, err = b.ReadFrom(io.LimitReader(c.c, int64(n)))
		payload = b.Bytes()
		if err == nil && len(payload) < int(n) {
			err = io.ErrUnexpectedEOF
		}
	}
	if err != nil {
		return 0, nil, c.readErr(err)
	}
	return kind, payload, nil
}

func (c *Conn) readErr(err error) error {
	if c.stopped.Load() {
		return ErrInterrupted
	}
	return err
}

// ReadMessage reads a message frame into m.
func (c *Conn) ReadMessage(m proto.Message, timeout time.Duration) error {
	kind, p, err := c.Read(timeout)
	if err != nil {
		return err
	}
	if kind != KindMessage {
		return status.Errorf(codes.InvalidArgument, "frame: a frame of kind %d where a message was due", kind)
	}
	if err := proto.Unmarshal(p, m); err != nil {
		return status.Errorf(codes.InvalidArgument, "frame: malformed message: %v", err)
	}
	return nil
}

// WriteMessage sends m, which must be gone within timeout.
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

func (c *Conn) write(b []byte, timeout time.Duration, final bool) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if err := c.c.SetWriteDeadline(time.Now().Add(timeout)); err != nil {
		return err
	}
	if !final && c.stopped.Load() {
		return ErrInterrupted
	}
	_, err := c.c.Write(b)
	return err
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

// ReadOpen reads the open frame, which must come first, within timeout.
func (c *Conn) ReadOpen(timeout time.Duration) (string, error) {
	kind, p, err := c.Read(timeout)
	if err != nil {
		return "", err
	}
	if kind != KindOpen {
		return "", status.Errorf(codes.InvalidArgument, "frame: a frame of kind %d where the open frame was due", kind)
	}
	return string(p), nil
}

func unmarshal(p []byte, m proto.Message) error {
	if err := proto.Unmarshal(p, m); err != nil {
		return status.Errorf(codes.Internal, "frame: malformed frame from the peer: %v", err)
	}
	return nil
}
