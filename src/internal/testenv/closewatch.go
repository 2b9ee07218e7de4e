package testenv

import (
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
