package notify

import (
	"context"
	"strings"
	"sync"
)

// Delivery bounds: every attempt in flight holds a connection, a file
// descriptor, for up to the attempt timeout. Before, 2,000 subscriptions
// to a receiver that never answers held 2,000 descriptors and exhausted a
// 1,024-descriptor host (accept4: too many open files; cluster clients
// could not dial). Attempts now wait for a slot: at most MaxDeliveries in
// all, and MaxDeliveriesPerHost to one receiver host, whose subscriptions
// then wait their turn instead of starving the others' receivers.
const (
	// DefaultMaxDeliveries is the cap when DelivererOptions does not say
	// (the orchestrator derives its own from the open-file limit).
	DefaultMaxDeliveries = 256
	// deliveriesPerHostShare: one receiver host gets at most a quarter
	// of the slots, unless configured.
	deliveriesPerHostShare = 4
)

// slots hands out delivery slots.
type slots struct {
	all     chan struct{}
	perHost int

	mu    sync.Mutex
	hosts map[string]*hostSlots
}

type hostSlots struct {
	ch    chan struct{}
	users int // holders and waiters; the entry goes with the last
}

func newSlots(total, perHost int) *slots {
	if total <= 0 {
		total = DefaultMaxDeliveries
	}
	if perHost <= 0 {
		perHost = max(1, total/deliveriesPerHostShare)
	}
	return &slots{all: make(chan struct{}, total), perHost: min(perHost, total), hosts: map[string]*hostSlots{}}
}

// acquire waits for a slot for host and one in all, or for ctx to end.
func (s *slots) acquire(ctx context.Context, host string) (release func(), err error) {
	host = strings.ToLower(host)
	s.mu.Lock()
	h := s.hosts[host]
	if h == nil {
		h = &hostSlots{ch: make(chan struct{}, s.perHost)}
		s.hosts[host] = h
	}
	h.users++
	s.mu.Unlock()
	leave := func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if h.users--; h.users == 0 {
			delete(s.hosts, host)
		}
	}
	select {
	case h.ch <- struct{}{}:
	case <-ctx.Done():
		leave()
		return nil, ctx.Err()
	}
	select {
	case s.all <- struct{}{}:
	case <-ctx.Done():
		<-h.ch
		leave()
		return nil, ctx.Err()
	}
	return sync.OnceFunc(func() {
		<-s.all
		<-h.ch
		leave()
	}), nil
}
