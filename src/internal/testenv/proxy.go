package testenv

import (
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// Proxy forwards loopback TCP connections to one address until the test
// cuts it: Cut closes every connection and refuses new ones (a partition
// between a client and its server), Stall keeps them open but forwards
// nothing (a partition that drops packets: a request waits for its
// deadline), Heal lets them through again.
type Proxy struct {
	ln     net.Listener
	target string
	wg     sync.WaitGroup

	stalled   atomic.Bool
	swallowed atomic.Int64 // bytes clients sent while stalled

	mu    sync.Mutex
	cut   bool
	conns map[net.Conn]bool
}

// NewProxy listens on a loopback port and forwards to target; it stops
// when the test ends.
func NewProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &Proxy{ln: ln, target: target, conns: map[net.Conn]bool{}}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(func() {
		_ = ln.Close()
		p.Cut()
		p.wg.Wait()
	})
	return p
}

// Addr is the proxy's address.
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Cut closes every connection and refuses new ones until Heal.
func (p *Proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = true
	for c := range p.conns {
		_ = c.Close()
	}
}

// Stall forwards nothing more, either way, until Heal; connections stay
// open and new ones are accepted.
func (p *Proxy) Stall() { p.stalled.Store(true) }

// Swallowed is how many bytes clients sent while the proxy was stalled: a
// request is in flight once it grows.
func (p *Proxy) Swallowed() int64 { return p.swallowed.Load() }

// Heal lets connections through again.
func (p *Proxy) Heal() {
	p.stalled.Store(false)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = false
}

func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		in, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		refused := p.cut
		p.mu.Unlock()
		if refused {
			_ = in.Close()
			continue
		}
		out, err := net.Dial("tcp", p.target)
		if err != nil {
			_ = in.Close()
			continue
		}
		p.mu.Lock()
		p.conns[in], p.conns[out] = true, true
		p.mu.Unlock()
		p.wg.Add(2)
		go p.pipe(out, in, true)
		go p.pipe(in, out, false)
	}
}

// pipe copies one direction (fromClient: the client's), dropping what
// arrives while stalled; when it ends, both ends close.
func (p *Proxy) pipe(dst, src net.Conn, fromClient bool) {
	defer p.wg.Done()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		switch {
		case n > 0 && p.stalled.Load():
			if fromClient {
				p.swallowed.Add(int64(n))
			}
		case n > 0:
			if _, werr := dst.Write(buf[:n]); werr != nil {
				err = werr
			}
		}
		if err != nil {
			break
		}
	}
	_ = dst.Close()
	_ = src.Close()
	p.mu.Lock()
	delete(p.conns, dst)
	delete(p.conns, src)
	p.mu.Unlock()
}

// EtcdBehindProxy is a client of the embedded etcd that reaches it through
// a Proxy, so the test can cut it off (a partitioned replica); both go
// when the test ends.
func (s *Stores) EtcdBehindProxy(t testing.TB) (*clientv3.Client, *Proxy) {
	t.Helper()
	p := NewProxy(t, strings.TrimPrefix(s.EtcdEndpoints()[0], "http://"))
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{"http://" + p.Addr()}, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	return cli, p
}
