package hub

import (
	"context"
	"fmt"
	"time"

	"golang.org/x/time/rate"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	pb "github.com/argus-mc/argus/src/apis/fleet"
	"github.com/argus-mc/argus/src/internal/appcontext"
)

// Defaults of what one cluster's credential may take of a replica. A
// credential is a cluster's, and a cluster may be compromised: these keep
// one agent from taking the slots, the etcd writes or the memory that the
// others need.
const (
	// DefaultMaxStreamsPerCluster: a reconnect overlaps the stream it
	// replaces (until its Hello supersedes it), a half-open one or two
	// more may linger until their Hello times out.
	DefaultMaxStreamsPerCluster = 4
	// DefaultConnectInterval and DefaultConnectBurst: an agent's backoff
	// starts at 250 ms and doubles, so ten quick reconnects then one a
	// second is more than a flapping link needs.
	DefaultConnectInterval = time.Second
	DefaultConnectBurst    = 10
	// DefaultReportBytesPerSecond and DefaultReportBurst bound the etcd
	// writes of one cluster's reports: a cluster's whole status after a
	// reconnect (twenty bundles of the largest size) lands in the burst,
	// and a steady 2 MiB/s is more than a cluster changes, yet leaves
	// etcd's compaction (every few seconds past half the quota) well
	// ahead of any one agent.
	DefaultReportBytesPerSecond = 2 << 20
	DefaultReportBurst          = 32 << 20
	// DefaultMaxQueuedBytes bounds the messages waiting for one agent
	// (manifests asked for, acknowledgements): while more wait, the hub
	// reads nothing more from it.
	DefaultMaxQueuedBytes = 8 << 20
	// reportOverhead is what a report costs beyond its writes, so that
	// empty reports count too.
	reportOverhead = 512
)

// clusterQuota is what one cluster's agent holds of this replica, kept
// across its streams (a reconnect starts nothing afresh).
type clusterQuota struct {
	streams  int
	connects *rate.Limiter
	writes   *rate.Limiter
}

// admit counts a stream of ref among those served, or refuses it with
// ResourceExhausted: the replica is full, the cluster holds as many
// streams as it may, or it reconnects too often.
func (h *Hub) admit(ref appcontext.ClusterRef) (*clusterQuota, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.streams >= h.opts.MaxAgents {
		h.metrics.refused.WithLabelValues("replica_full").Inc()
		return nil, status.Error(codes.ResourceExhausted, "this replica serves as many agents as it may; try another")
	}
	q := h.quotas[ref]
	if q == nil {
		q = &clusterQuota{connects: rate.NewLimiter(rate.Every(h.opts.ConnectInterval), h.opts.ConnectBurst),
			writes: rate.NewLimiter(rate.Limit(h.opts.ReportBytesPerSecond), h.opts.ReportBurst)}
		h.quotas[ref] = q
	}
	if q.streams >= h.opts.MaxStreamsPerCluster {
		h.metrics.refused.WithLabelValues("cluster_streams").Inc()
		return nil, status.Errorf(codes.ResourceExhausted, "cluster %s already holds %d streams", ref, q.streams)
	}
	if !q.connects.Allow() {
		h.metrics.refused.WithLabelValues("cluster_reconnects").Inc()
		return nil, status.Errorf(codes.ResourceExhausted, "cluster %s reconnects more often than once every %s; back off", ref, h.opts.ConnectInterval)
	}
	q.streams++
	h.streams++
	h.metrics.agents.Inc()
	return q, nil
}

// dismiss ends what admit counted; the quota of a cluster no longer
// registered goes with its last stream.
func (h *Hub) dismiss(ref appcontext.ClusterRef) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.streams--
	h.metrics.agents.Dec()
	if q := h.quotas[ref]; q != nil {
		q.streams--
		if q.streams <= 0 && !h.opts.Credentials.Pulls(ref) {
			delete(h.quotas, ref)
		}
	}
}

// forgetQuota drops the quota of a cluster deleted, unless a stream of it
// is still counted (dismiss drops it then).
func (h *Hub) forgetQuota(ref appcontext.ClusterRef) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if q := h.quotas[ref]; q != nil && q.streams <= 0 {
		delete(h.quotas, ref)
	}
}

// throttle waits until the cluster may write n more bytes of reports.
// The agent is not silent while the hub makes it wait: its silence timer
// counts from the end of the wait.
func (s *session) throttle(n int) error {
	r := s.quota.writes.ReserveN(time.Now(), min(n+reportOverhead, s.h.opts.ReportBurst))
	d := r.Delay()
	if d <= 0 {
		return nil
	}
	s.h.metrics.throttled.Inc()
	s.heardFor(d)
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-s.ctx.Done():
		r.Cancel()
		return fmt.Errorf("wait for the cluster's write budget: %w", context.Cause(s.ctx))
	}
}

// messageBytes is what a queued message counts against MaxQueuedBytes.
func messageBytes(m *pb.HubMessage) int { return proto.Size(m) }

// waitRoom waits until fewer than MaxQueuedBytes wait to be sent to the
// agent: an agent that asks and does not read gets nothing more read.
func (s *session) waitRoom() error {
	for {
		s.mu.Lock()
		full := s.queued >= s.h.opts.MaxQueuedBytes
		s.mu.Unlock()
		if !full {
			return nil
		}
		select {
		case <-s.room:
		case <-s.ctx.Done():
			return context.Cause(s.ctx)
		}
	}
}

// sent takes a message sent off the queued bytes.
func (s *session) sent(n int) {
	s.mu.Lock()
	s.queued -= n
	s.mu.Unlock()
	select {
	case s.room <- struct{}{}:
	default:
	}
}
