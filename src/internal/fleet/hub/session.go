package hub

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sirupsen/logrus"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	pb "github.com/argus-mc/argus/src/apis/fleet"
	"github.com/argus-mc/argus/src/internal/appcontext"
	"github.com/argus-mc/argus/src/internal/etcdwatch"
)

// session is one agent's stream on this replica.
type session struct {
	h      *Hub
	ref    appcontext.ClusterRef
	id     string
	cred   string
	epoch  int64
	guard  string // the session key's value, which guards every write
	stream pb.Fleet_ConnectServer
	log    *logrus.Entry
	ctx    context.Context
	cancel context.CancelCauseFunc
	quota  *clusterQuota
	leave  func()        // undoes open's counting of the stream
	room   chan struct{} // a send made room in the queue
	// lastSend is when the sender last sent the agent anything (Unix
	// nanoseconds): a heartbeat is acknowledged when the stream would
	// otherwise stay quiet longer than maxQuietToAgent.
	lastSend atomic.Int64

	// The sender runs while there is something to send, and only then:
	// an idle stream holds no goroutine of the session's but its
	// handler's. senders counts it for the handler, which waits for it.
	senders sync.WaitGroup

	mu      sync.Mutex
	sending bool // the sender runs
	ready   bool // the Welcome is queued: a sender may start (it goes first)
	closed  bool // the handler is returning: no sender starts
	out     []*pb.HubMessage
	queued  int               // bytes of out
	events  []etcdwatch.Event // work changes not sent yet
	batches []*pb.HubMessage  // work batches made, not sent yet (the first catch-up)
	resync  bool              // send the cluster's work again from sentRev (complete)
	sentRev int64
	items   map[itemKey]*item
	silent  bool // the agent went quiet: its monitor is to be recorded Silent

	stateMu   sync.Mutex // orders the cluster state writes
	state     appcontext.ClusterState
	seenDue   time.Time // when LastSeen is next written if nothing else is
	silence   *time.Timer
	lastHeard time.Time
}

// itemKey names a placement within the session's cluster.
type itemKey struct{ id, app string }

// item is what the session knows of one of its cluster's work items:
// enough to check what the agent reports about it.
type item struct {
	gen      int64
	statusID string
	del      bool
	keys     map[string]bool // resource keys
	blobs    map[string]bool // manifest hashes
	progress progressRecord  // as last written
}

// maxBufferedEvents bounds the work changes a session holds for a slow
// agent; beyond it the session sends the cluster's work again instead.
const maxBufferedEvents = 1024

// Connect serves one agent's stream (the Fleet service) that came through
// Handler.
func (h *Hub) Connect(stream pb.Fleet_ConnectServer) error {
	return h.connect(stream, transportHTTP2, bearer(stream.Context()), nil)
}

// connect serves one agent's stream that came on transport with the
// credential cred. own, if set, ends the stream (it is its connection's
// only one): the handler then receives itself (serveOwnConn).
func (h *Hub) connect(stream pb.Fleet_ConnectServer, transport, cred string, own io.Closer) error {
	s, err := h.open(stream, transport, cred)
	if err != nil {
		return err
	}
	return s.serve(own)
}

// open authenticates a stream, reads its Hello and starts its session;
// the session's serve then serves it. An error is the stream's status,
// everything undone.
func (h *Hub) open(stream pb.Fleet_ConnectServer, transport, cred string) (*session, error) {
	if !h.enter() {
		return nil, status.Error(codes.Unavailable, "the fleet hub is starting or stopping")
	}
	ref, epoch, err := h.opts.Credentials.Authenticate(cred)
	if err != nil {
		h.wg.Done()
		return nil, status.Error(codes.Unauthenticated, err.Error())
	}
	// Counted from here: a stream that says nothing holds a slot too.
	quota, err := h.admit(ref)
	if err != nil {
		h.wg.Done()
		return nil, err
	}
	streams := h.metrics.streams.WithLabelValues(transport)
	streams.Inc()
	leave := func() {
		streams.Dec()
		h.dismiss(ref)
		h.wg.Done()
	}
	hello, err := h.hello(stream)
	if err != nil {
		leave()
		return nil, err
	}
	named := appcontext.ClusterRef{Provider: hello.GetClusterProvider(), Name: hello.GetCluster()}
	if named != ref {
		leave()
		h.log.WithFields(logrus.Fields{"cluster": ref.String(), "named": fmt.Sprintf("%.120s", named.String())}).Warn("an agent named another cluster than its credential's")
		return nil, status.Errorf(codes.PermissionDenied, "the credential is for cluster %s, not %.120s", ref, named)
	}
	s := h.newSession(stream, ref, cred, epoch)
	s.quota, s.leave = quota, leave
	if err := s.start(hello); err != nil {
		s.cancel(err)
		s.waitSender()
		s.finish()
		s.release()
		s.log.WithError(err).Info("agent's stream refused at its start")
		return nil, err
	}
	s.log.WithFields(logrus.Fields{"work_revision": hello.GetWorkRevision(), "transport": transport}).Info("agent connected")
	return s, nil
}

// release lets go of what open took for the session.
func (s *session) release() {
	s.h.unregister(s)
	s.cancel(nil)
	s.leave()
}

// serve serves a started session's stream until it ends, and returns the
// stream's status. own is as for connect.
func (s *session) serve(own io.Closer) error {
	defer s.release()
	if own != nil {
		s.serveOwnConn(own)
	} else {
		s.serveShared()
	}
	s.finish()
	cause := context.Cause(s.ctx)
	s.log.WithField("cause", cause).Info("agent disconnected")
	switch {
	case errors.Is(cause, errSuperseded):
		return status.Error(codes.Aborted, "superseded by a newer stream of the same agent")
	case status.Code(cause) != codes.Unknown:
		return cause // a refusal (PermissionDenied, InvalidArgument) as it is
	case cause != nil && !errors.Is(cause, context.Canceled):
		return status.Error(codes.Unavailable, cause.Error())
	}
	return nil
}

// refusalGrace bounds how long a stream refused for what its agent sent
// waits for what is being sent before it, so that its status follows it;
// then its connection is closed.
const refusalGrace = 5 * time.Second

// serveOwnConn reads the agent's messages on this goroutine until the
// stream or the session ends. The stream is the only one of its
// connection: ending the session calls conn's Close, which ends a Recv
// (gRPC's native transport: closes the connection; the framed one: stops
// its reads and writes, leaving it open for the stream's status).
func (s *session) serveOwnConn(conn io.Closer) {
	closed := make(chan struct{})
	stop := context.AfterFunc(s.ctx, func() {
		defer close(closed)
		_ = conn.Close()
	})
	err := s.receive()
	if err != nil && stop() {
		// Refused for what the agent sent: the handler's status tells it,
		// after what is being sent, if that goes in time.
		s.cancel(err)
		s.stopSenders()
		idle := make(chan struct{})
		go func() {
			defer close(idle)
			s.senders.Wait()
		}()
		grace := time.NewTimer(refusalGrace)
		defer grace.Stop()
		select {
		case <-idle:
		case <-grace.C:
			_ = conn.Close()
			<-idle
		}
		return
	}
	s.cancel(err)
	s.waitSender()
	if !stop() {
		<-closed // the close started when the session ended
	}
}

// serveShared serves a stream whose connection may carry others (the
// Handler path): a receiver reads the agent's messages while this
// handler waits for the session to end; returning then ends the stream,
// and so the receiver's Recv. The hub waits for the receiver.
func (s *session) serveShared() {
	s.h.wg.Add(1)
	go func() {
		defer s.h.wg.Done()
		s.cancel(s.receive())
	}()
	<-s.ctx.Done()
	s.waitSender()
}

// helloTimeout bounds the wait for a stream's Hello.
const helloTimeout = 10 * time.Second

// hello reads a stream's first message, which must be a Hello, within
// helloTimeout. The read outlives a timeout only until the stream ends,
// which returning ends; the hub waits for it.
func (h *Hub) hello(stream pb.Fleet_ConnectServer) (*pb.Hello, error) {
	type result struct {
		m   *pb.AgentMessage
		err error
	}
	got := make(chan result, 1)
	h.wg.Add(1)
	go func() {
		defer h.wg.Done()
		m, err := stream.Recv()
		got <- result{m, err}
	}()
	t := time.NewTimer(helloTimeout)
	defer t.Stop()
	select {
	case r := <-got:
		if r.err != nil {
			if _, ok := status.FromError(r.err); !ok { // a connection's error: its text names addresses
				return nil, status.Error(codes.Unavailable, "the stream ended before its Hello")
			}
			return nil, r.err
		}
		if r.m.GetHello() == nil {
			return nil, status.Error(codes.InvalidArgument, "the first message must be a Hello")
		}
		return r.m.GetHello(), nil
	case <-t.C:
		return nil, status.Errorf(codes.DeadlineExceeded, "no Hello within %s", helloTimeout)
	}
}

// enter counts a stream's handler among the goroutines Run waits for,
// unless the hub is not running (yet, or any more).
func (h *Hub) enter() bool {
	select {
	case <-h.started:
	default:
		return false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.stopping {
		return false
	}
	h.wg.Add(1)
	return true
}

// bearer takes the credential out of the call's metadata.
func bearer(ctx context.Context) string {
	md, _ := metadata.FromIncomingContext(ctx)
	for _, v := range md.Get("authorization") {
		scheme, token, _ := strings.Cut(strings.TrimSpace(v), " ")
		if strings.EqualFold(scheme, "Bearer") {
			return strings.TrimSpace(token)
		}
	}
	return ""
}

func (h *Hub) newSession(stream pb.Fleet_ConnectServer, ref appcontext.ClusterRef, cred string, epoch int64) *session {
	var b [8]byte
	_, _ = rand.Read(b[:])
	id := hex.EncodeToString(b[:])
	ctx, cancel := context.WithCancelCause(stream.Context())
	rec, _ := json.Marshal(sessionRecord{Session: id, Replica: h.opts.Replica, Since: h.opts.Now().UTC().Format(time.RFC3339Nano)})
	return &session{h: h, ref: ref, id: id, cred: cred, epoch: epoch, guard: string(rec), stream: stream,
		log: h.log.WithFields(logrus.Fields{"cluster": ref.String(), "session": id}), ctx: ctx, cancel: cancel,
		room: make(chan struct{}, 1), items: map[itemKey]*item{}}
}

// start records the session, replacing any other of the cluster, and
// queues the Welcome and the agent's work since the revision it holds.
func (s *session) start(hello *pb.Hello) error {
	h := s.h
	h.mu.Lock()
	old := h.sessions[s.ref]
	h.sessions[s.ref] = s
	h.mu.Unlock()
	// Checked again once registered: a credential replaced (or a cluster
	// deleted) while this stream waited for its Hello either finds this
	// session in credentialsChanged or fails this check.
	if ref, epoch, err := h.opts.Credentials.Authenticate(s.cred); err != nil || ref != s.ref || epoch != s.epoch {
		h.restore(s, old)
		return errDeregistered
	}
	if err := s.recordSession(s.ctx, h.leaseID()); err != nil {
		h.restore(s, old)
		if errors.Is(err, errDeregistered) {
			return err
		}
		return status.Error(codes.Unavailable, err.Error())
	}
	if old != nil { // its writes fail from the record above on
		old.end(errSuperseded)
	}
	resp, err := h.opts.Client.Get(s.ctx, h.opts.Contexts.ClusterStateKey(s.ref))
	if err != nil {
		return status.Error(codes.Unavailable, err.Error())
	}
	if len(resp.Kvs) > 0 {
		_ = json.Unmarshal(resp.Kvs[0].Value, &s.state)
	}
	// The cluster's work is read before the Welcome: the agent's first
	// report (what the last stream did not get acknowledged) comes right
	// behind it, and is checked against the work; read later, a resent
	// change would be dropped as about work unknown, and acknowledged.
	catchUp, err := s.catchUp(max(0, hello.GetWorkRevision()))
	if err != nil {
		return status.Error(codes.Unavailable, err.Error())
	}
	s.lastHeard = h.opts.Now()
	s.silence = time.AfterFunc(h.opts.SilentAfter, s.wentSilent)
	s.mu.Lock()
	welcome := &pb.HubMessage{Body: &pb.HubMessage_Welcome{Welcome: &pb.Welcome{Session: s.id,
		HeartbeatSeconds: int32(h.opts.Heartbeat / time.Second), StatusEpoch: s.epoch}}}
	s.out, s.queued = append(s.out, welcome), s.queued+messageBytes(welcome)
	s.batches = catchUp
	s.ready = true
	s.mu.Unlock()
	s.signal()
	return nil
}

// errDeregistered is a session's cluster deleted or registered anew
// since its agent's credential was checked.
var errDeregistered = status.Error(codes.Unauthenticated, "the agent credential is unknown or revoked")

// recordSession writes the session key on lease, provided the cluster is
// still the registration the credential was checked against (its epoch
// is the record's creation revision): a replica that has not heard of a
// deletion yet cannot record a session, nor so let its writes through.
func (s *session) recordSession(ctx context.Context, lease clientv3.LeaseID) error {
	resp, err := s.h.opts.Client.Txn(ctx).If(s.registeredCmp()).
		Then(clientv3.OpPut(s.h.keys.session(s.ref), s.guard, clientv3.WithLease(lease))).Commit()
	if err != nil {
		return fmt.Errorf("record the agent's session: %w", err)
	}
	if !resp.Succeeded {
		return errDeregistered
	}
	return nil
}

// rerecordSession writes the session key again on a new lease (the old
// one's keys went with it), unless another session of the cluster was
// recorded meanwhile (errSuperseded) or the cluster is gone.
func (s *session) rerecordSession(ctx context.Context, lease clientv3.LeaseID) error {
	key := s.h.keys.session(s.ref)
	put := clientv3.OpPut(key, s.guard, clientv3.WithLease(lease))
	for _, free := range []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(key), "=", 0), s.guardCmp()} {
		resp, err := s.h.opts.Client.Txn(ctx).If(s.registeredCmp(), free).Then(put).Commit()
		if err != nil {
			return fmt.Errorf("record the agent's session again: %w", err)
		}
		if resp.Succeeded {
			return nil
		}
	}
	if !s.stillAuthentic() {
		return errDeregistered
	}
	return errSuperseded
}

// registeredCmp holds while the cluster is the registration the
// session's credential was checked against.
func (s *session) registeredCmp() clientv3.Cmp {
	return clientv3.Compare(clientv3.CreateRevision(s.h.opts.Credentials.RecordKey(s.ref)), "=", s.epoch)
}

// guardCmp holds while this session is the cluster's.
func (s *session) guardCmp() clientv3.Cmp {
	return clientv3.Compare(clientv3.Value(s.h.keys.session(s.ref)), "=", s.guard)
}

// restore puts back the session s replaced, s having failed to start,
// unless that one ended meanwhile: a session's context ends before its
// handler unregisters it (under h.mu), so one whose context is live here
// still unregisters itself later.
func (h *Hub) restore(s, old *session) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.sessions[s.ref] != s {
		return
	}
	if old != nil && old.ctx.Err() == nil {
		h.sessions[s.ref] = old
	} else {
		delete(h.sessions, s.ref)
	}
}

// unregister forgets the session, if it is still the cluster's here.
func (h *Hub) unregister(s *session) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.sessions[s.ref] == s {
		delete(h.sessions, s.ref)
	}
}

// finish deletes the session key if it is still this session's, and
// records when the agent was last heard: the cluster's keeper then counts
// the time without a stream.
func (s *session) finish() {
	ops := []clientv3.Op{clientv3.OpDelete(s.h.keys.session(s.ref))}
	s.stateMu.Lock()
	if s.silence != nil {
		s.silence.Stop()
	}
	// The cluster's last-seen time as it goes, with the key's deletion:
	// the one written last may be a LastSeenInterval older.
	// (A wait the hub imposed counts as heard until it ends: not past now.)
	// Not for a cluster deleted or joined anew: its state is not this
	// agent's to write any more.
	now := s.h.opts.Now()
	if st, heard := s.state, minTime(s.lastHeard, now); st.Agent && st.Connectivity == appcontext.Available && heard.After(st.LastSeen) && s.stillAuthentic() {
		st.LastSeen, st.Updated = heard.UTC(), now.UTC()
		if op, err := s.h.opts.Contexts.ClusterStateOp(s.ref, st); err == nil {
			ops = append(ops, op)
		}
	}
	s.stateMu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := s.h.opts.Client.Txn(ctx).If(s.guardCmp()).Then(ops...).Commit(); err != nil {
		s.log.WithError(err).Warn("cannot delete the session key; it goes with this replica's lease")
	}
}

// end stops the session's stream.
func (s *session) end(cause any) {
	switch c := cause.(type) {
	case error:
		s.cancel(c)
	case string:
		s.cancel(errors.New(c))
	}
}

func (s *session) stillAuthentic() bool {
	ref, _, err := s.h.opts.Credentials.Authenticate(s.cred)
	return err == nil && ref == s.ref
}

// signal starts the sender unless it runs (it sends what was queued
// before it stops), the Welcome is not queued yet, or the handler is
// returning.
func (s *session) signal() {
	s.mu.Lock()
	if s.sending || !s.ready || s.closed {
		s.mu.Unlock()
		return
	}
	s.sending = true
	s.senders.Add(1)
	s.mu.Unlock()
	go func() {
		defer s.senders.Done()
		s.sendAll()
	}()
}

// stopSenders keeps senders from starting.
func (s *session) stopSenders() {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
}

// waitSender stops senders from starting and waits for the one running.
func (s *session) waitSender() {
	s.stopSenders()
	s.senders.Wait()
}

// queue adds a message for the agent.
func (s *session) queue(m *pb.HubMessage) {
	s.mu.Lock()
	s.out = append(s.out, m)
	s.queued += messageBytes(m)
	s.mu.Unlock()
	s.signal()
}

// receive reads the agent's messages until the stream or the session
// ends (nil: the agent went away, and reconnects) or a message is
// refused (its error, for the agent).
func (s *session) receive() error {
	for {
		if s.waitRoom() != nil {
			return nil
		}
		m, err := s.stream.Recv()
		if s.ctx.Err() != nil {
			return nil
		}
		if err != nil {
			return refusedFrame(err)
		}
		s.heard()
		switch b := m.GetBody().(type) {
		case *pb.AgentMessage_WorkAck:
			s.log.WithField("revision", b.WorkAck.GetRevision()).Debug("work acknowledged")
		case *pb.AgentMessage_BlobRequest:
			err = s.blobs(b.BlobRequest)
		case *pb.AgentMessage_Report:
			err = s.report(b.Report)
		}
		if err != nil {
			return err
		}
	}
}

// refusedFrame is a Recv error that refuses what the agent sent (a message
// too large, malformed, or of the wrong kind: the agent gets it as the
// stream's status), or nil for a stream that ended (the agent reconnects).
func refusedFrame(err error) error {
	switch status.Code(err) {
	case codes.InvalidArgument, codes.ResourceExhausted:
		return err
	}
	return nil
}

// sendAll sends what is queued until nothing is, or the session ends.
func (s *session) sendAll() {
	for {
		s.mu.Lock()
		out, events, made, resync, silent := s.out, s.events, s.batches, s.resync, s.silent
		s.out, s.events, s.batches, s.resync, s.silent = nil, nil, nil, false, false
		from := s.sentRev
		if s.ctx.Err() != nil || len(out) == 0 && len(events) == 0 && len(made) == 0 && !resync && !silent {
			s.sending = false
			s.mu.Unlock()
			return
		}
		s.mu.Unlock()
		if err := s.sendQueued(out, events, made, from, resync, silent); err != nil {
			s.end(err)
		}
	}
}

// sendQueued sends one round of what sendAll took from the queue.
func (s *session) sendQueued(out []*pb.HubMessage, events []etcdwatch.Event, made []*pb.HubMessage, from int64, resync, silent bool) error {
	if silent {
		s.writeSilent()
	}
	for _, m := range out {
		if s.ctx.Err() != nil {
			return nil // the session ended: nothing more goes
		}
		if err := s.send(m); err != nil {
			return err
		}
		s.sent(messageBytes(m))
	}
	batches := made
	if resync {
		more, err := s.catchUp(from)
		if err != nil {
			return err
		}
		batches = append(batches, more...)
	} else {
		batches = append(batches, s.live(events)...)
	}
	for _, m := range batches {
		if s.ctx.Err() != nil {
			return nil
		}
		s.h.metrics.batches.Inc()
		if err := s.send(m); err != nil {
			return err
		}
	}
	return nil
}

// send sends m, noting when.
func (s *session) send(m *pb.HubMessage) error {
	err := s.stream.Send(m)
	s.lastSend.Store(s.h.opts.Now().UnixNano())
	return err
}

// workEvent hands a change of a work record to its cluster's session here.
func (h *Hub) workEvent(ev etcdwatch.Event) {
	rest := strings.TrimPrefix(ev.Key, h.keys.workPrefix())
	k, ok := parsePlacement(rest)
	if !ok {
		return
	}
	h.mu.Lock()
	s := h.sessions[k.ref]
	h.mu.Unlock()
	if s == nil {
		return
	}
	s.mu.Lock()
	if len(s.events) >= maxBufferedEvents {
		s.events, s.resync = nil, true
	} else if !s.resync {
		s.events = append(s.events, ev)
	}
	s.mu.Unlock()
	s.signal()
}

// catchUp reads the cluster's work and returns the batches that bring an
// agent holding revision from up to date: every key, and the items
// changed since.
func (s *session) catchUp(from int64) ([]*pb.HubMessage, error) {
	prefix := s.h.keys.clusterWork(s.ref)
	resp, err := s.h.opts.Client.Get(s.ctx, prefix, clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("read the cluster's work: %w", err)
	}
	first := &pb.WorkBatch{Complete: true}
	var changed []*pb.WorkItem
	items := map[itemKey]*item{}
	for _, kv := range resp.Kvs {
		k, ok := parsePlacement(strings.TrimPrefix(string(kv.Key), s.h.keys.workPrefix()))
		if !ok {
			continue
		}
		wi, it, err := decodeWork(kv.Value, kv.ModRevision)
		if err != nil {
			s.log.WithError(err).WithField("work", string(kv.Key)).Warn("malformed work record skipped")
			continue
		}
		first.Keys = append(first.Keys, &pb.WorkKey{ContextId: k.id, App: k.app})
		items[itemKey{k.id, k.app}] = it
		if kv.ModRevision > from {
			changed = append(changed, wi)
		}
	}
	s.mu.Lock()
	for k, it := range items {
		if old := s.items[k]; old != nil && old.gen == it.gen {
			it.progress = old.progress
		}
	}
	s.items = items
	s.sentRev = resp.Header.Revision
	s.mu.Unlock()
	return splitBatch(first, changed, resp.Header.Revision), nil
}

// live turns work changes into a batch.
func (s *session) live(events []etcdwatch.Event) []*pb.HubMessage {
	b := &pb.WorkBatch{}
	var items []*pb.WorkItem
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, ev := range events {
		if ev.ModRevision <= s.sentRev {
			continue // sent with the catch-up already
		}
		k, ok := parsePlacement(strings.TrimPrefix(ev.Key, s.h.keys.workPrefix()))
		if !ok {
			continue
		}
		ik := itemKey{k.id, k.app}
		if ev.Deleted {
			delete(s.items, ik)
			b.Removed = append(b.Removed, &pb.WorkKey{ContextId: k.id, App: k.app})
		} else if wi, it, err := decodeWork(ev.Value, ev.ModRevision); err == nil {
			s.items[ik] = it
			items = append(items, wi)
		}
		b.Revision = max(b.Revision, ev.ModRevision)
	}
	if b.Revision == 0 {
		return nil
	}
	s.sentRev = b.Revision
	return splitBatch(b, items, b.Revision)
}

// maxBatchItems bounds the items of one message.
const maxBatchItems = 256

// splitBatch spreads items over messages; only the last names the
// revision, so the agent acknowledges it once it holds everything.
func splitBatch(first *pb.WorkBatch, items []*pb.WorkItem, rev int64) []*pb.HubMessage {
	var out []*pb.HubMessage
	b := first
	for {
		n := min(len(items), maxBatchItems)
		b.Items, items = items[:n], items[n:]
		out = append(out, &pb.HubMessage{Body: &pb.HubMessage_Work{Work: b}})
		if len(items) == 0 {
			b.Revision = rev
			return out
		}
		b.Revision = 0
		b = &pb.WorkBatch{}
	}
}

// decodeWork turns a work record into the message item and what the
// session keeps of it.
func decodeWork(value []byte, gen int64) (*pb.WorkItem, *item, error) {
	var rec workRecord
	if err := json.Unmarshal(value, &rec); err != nil {
		return nil, nil, err
	}
	wi := &pb.WorkItem{ContextId: rec.Context, App: rec.App, Generation: gen, StatusId: rec.StatusID, Namespace: rec.Namespace,
		FieldValidation: rec.FieldValidation, Delete: rec.Delete, Update: rec.Update, Group: rec.Group, Adopt: rec.Adopt}
	it := &item{gen: gen, statusID: rec.StatusID, del: rec.Delete, keys: map[string]bool{}, blobs: map[string]bool{}}
	for _, r := range rec.Resources {
		res := &pb.Resource{Group: r.Group, Version: r.Version, Kind: r.Kind, Name: r.Name,
			Namespace: r.Namespace, Removed: r.Removed, Sha256: r.SHA256, Size: r.Size}
		if r.Hook != nil {
			res.Hook = &pb.Hook{Events: r.Hook.Events, Weight: int32(r.Hook.Weight), DeletePolicies: r.Hook.DeletePolicies}
		}
		wi.Resources = append(wi.Resources, res)
		it.keys[r.key()] = true
		it.blobs[r.SHA256] = true
	}
	return wi, it, nil
}

// maxBlobAnswer bounds the manifests of one Blobs message.
const maxBlobAnswer = 2 << 20

// maxBlobRequest bounds the hashes one request may name.
const maxBlobRequest = 4096

// blobs answers a request for manifests, which must belong to the
// session's cluster's work.
func (s *session) blobs(req *pb.BlobRequest) error {
	id := req.GetContextId()
	if len(req.GetSha256()) > maxBlobRequest {
		return status.Errorf(codes.InvalidArgument, "a blob request may name at most %d manifests", maxBlobRequest)
	}
	s.mu.Lock()
	allowed := map[string]bool{}
	for k, it := range s.items {
		if k.id == id {
			for sum := range it.blobs {
				allowed[sum] = true
			}
		}
	}
	s.mu.Unlock()
	msg := &pb.Blobs{ContextId: id}
	size := 0
	asked := make(map[string]bool, len(req.GetSha256()))
	for _, sum := range req.GetSha256() {
		if asked[sum] {
			continue // each manifest once, however often it is named
		}
		asked[sum] = true
		if !allowed[sum] {
			s.log.WithField("context", fmt.Sprintf("%.40q", id)).Warn("an agent asked for a manifest not in its cluster's work")
			return status.Errorf(codes.PermissionDenied, "manifest %.80s of context %.40s is not in cluster %s's work", sum, id, s.ref)
		}
		if err := s.waitRoom(); err != nil {
			return err
		}
		data, err := s.h.blobs.get(s.ctx, id, sum)
		if err != nil {
			s.log.WithError(err).Debug("manifest not found; the agent gets the work's next change")
			data = nil
		}
		if size+len(data) > maxBlobAnswer && len(msg.Blobs) > 0 {
			s.queue(&pb.HubMessage{Body: &pb.HubMessage_Blobs{Blobs: msg}})
			msg, size = &pb.Blobs{ContextId: id}, 0
		}
		msg.Blobs = append(msg.Blobs, &pb.Blob{Sha256: sum, Data: data})
		size += len(data)
	}
	s.queue(&pb.HubMessage{Body: &pb.HubMessage_Blobs{Blobs: msg}})
	return nil
}

// minTime is the earlier of a and b.
func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}
