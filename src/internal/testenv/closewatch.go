package testenv

import (
	"context"
	"net"
	"sync"
)

// CloseWatch is a client connection that tells when the server closed it:
// Closed is closed once a read fails (EOF, or a reset).
type CloseWatch struct {
	net.Conn
	once   sync.Once
	closed chan struct{}
}

// WatchClose wraps c.
func WatchClose(c net.Conn) *CloseWatch { return &CloseWatch{Conn: c, closed: make(chan struct{})} }

func (c *CloseWatch) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if err != nil {
		c.once.Do(func() { close(c.closed) })
	}
	return n, err
}

// Closed is closed once the server closed the connection.
func (c *CloseWatch) Closed() <-chan struct{} { return c.closed }

// WatchingDialer is a gRPC context dialer whose connections are watched:
// the first it dials is sent on first (later ones are not).
func WatchingDialer(first chan<- *CloseWatch) func(context.Context, string) (net.Conn, error) {
	return func(ctx context.Context, addr string) (net.Conn, error) {
		c, err := (&net.Dialer{}).DialContext(ctx, "tcp", addr)
		if err != nil {
			return nil, err
		}
		w := WatchClose(c)
		select {
		case first <- w:
		default:
		}
		return w, nil
	}
}
