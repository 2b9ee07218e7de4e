package etcd

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/sirupsen/logrus"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/argus-mc/argus/src/internal/logging"
)

const (
	// DefaultCompactionRetention is the history the embedded server keeps:
	// enough for a watcher that lost its connection to resume, short
	// enough that a burst of writes is reclaimed within minutes.
	DefaultCompactionRetention = 5 * time.Minute
	// DefaultQuotaBytes is etcd's own default backend quota.
	DefaultQuotaBytes = 2 << 30
	// DefaultMaintainInterval is how often Maintain looks at the server.
	DefaultMaintainInterval = 5 * time.Second
)

// ErrNoSpace marks a store whose etcd raised its NOSPACE alarm: writes are
// refused until space is freed and the alarm disarmed; reads still work.
var ErrNoSpace = errors.New("etcd database space exceeded (NOSPACE alarm)")

// spaceState is the last maintenance pass's verdict.
type spaceState struct {
	mu  sync.Mutex
	err error // wraps ErrNoSpace while the alarm is raised
}

func (s *spaceState) set(err error) (changed bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	changed = (s.err == nil) != (err == nil)
	s.err = err
	return changed
}

func (s *spaceState) get() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// NoSpace returns why writes are refused (an error wrapping ErrNoSpace
// that says what to do), or nil: as the last maintenance pass found it.
func (s *Store) NoSpace() error { return s.space.get() }

// MaintainOptions configures Maintain.
type MaintainOptions struct {
	// Interval between passes; 0 means DefaultMaintainInterval.
	Interval time.Duration
	// Writable runs after every pass that found etcd taking writes: what
	// was put off while it did not can be done then.
	Writable func(ctx context.Context)
	Logger   *logrus.Entry
}

// Maintain keeps the store writable until ctx ends. Every pass reads the
// alarms and, for the embedded server, its size:
//
//   - history past half the quota (a burst of writes faster than the
//     periodic compaction) is compacted at once, all of it;
//   - a file more than twice what it holds is defragmented;
//   - under the NOSPACE alarm, history is compacted, the file
//     defragmented and the alarm disarmed once live data leaves room
//     (a fifth of the quota at least); otherwise the alarm stays and
//     NoSpace says to delete data or raise the quota.
//
// An external etcd is only watched: its compaction, defragmentation and
// alarms are its operator's (docs/operations.md).
func (s *Store) Maintain(ctx context.Context, opts MaintainOptions) error {
	if opts.Interval <= 0 {
		opts.Interval = DefaultMaintainInterval
	}
	if opts.Logger == nil {
		opts.Logger = logrus.NewEntry(logging.Discard())
	}
	t := time.NewTicker(opts.Interval)
	defer t.Stop()
	for {
		s.MaintainOnce(ctx, opts)
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// MaintainOnce runs one pass of Maintain (the orchestrator runs one at
// start-up, before anything writes).
func (s *Store) MaintainOnce(ctx context.Context, opts MaintainOptions) {
	log := opts.Logger
	if log == nil {
		log = logrus.NewEntry(logging.Discard())
	}
	pctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	err := s.pass(pctx, log)
	if err != nil && !errors.Is(err, ErrNoSpace) {
		if ctx.Err() == nil {
			log.WithError(err).Warn("etcd maintenance pass failed")
		}
		return // the verdict stands until a pass completes
	}
	if s.space.set(err) {
		if err != nil {
			log.WithError(err).Error("etcd refuses writes: the API answers 503 to changes and /readyz is not ready")
		} else {
			log.Info("etcd accepts writes again")
		}
	}
	if err == nil && opts.Writable != nil {
		opts.Writable(ctx)
	}
}

// pass returns ErrNoSpace (wrapped) while the alarm stays raised, another
// error when etcd could not be asked.
func (s *Store) pass(ctx context.Context, log *logrus.Entry) error {
	alarms, err := s.Client.AlarmList(ctx)
	if err != nil {
		return fmt.Errorf("list alarms: %w", err)
	}
	var nospace []*pb.AlarmMember
	for _, a := range alarms.Alarms {
		if a.Alarm == pb.AlarmType_NOSPACE {
			nospace = append(nospace, a)
		}
	}
	if s.server == nil { // external: reported, never acted on
		if len(nospace) > 0 {
			return fmt.Errorf("%w: free space on the etcd cluster (compact, defragment) and disarm the alarm (etcdctl alarm disarm)", ErrNoSpace)
		}
		return nil
	}
	ep := s.embedded[0]
	st, err := s.Client.Status(ctx, ep)
	if err != nil {
		return fmt.Errorf("status: %w", err)
	}
	quota := s.quota
	if st.DbSizeQuota > 0 {
		quota = st.DbSizeQuota
	}
	fields := logrus.Fields{"db_size": st.DbSize, "db_in_use": st.DbSizeInUse, "quota": quota, "revision": st.Header.Revision}
	if len(nospace) == 0 && st.DbSizeInUse <= quota/2 {
		if free := st.DbSize - st.DbSizeInUse; free >= 16<<20 && free >= st.DbSize/2 {
			log.WithFields(fields).Info("defragmenting etcd: more than half its file is free")
			return s.defrag(ctx, ep)
		}
		return nil
	}
	// Over half the quota, or out of it: every revision but the last goes.
	if _, err := s.Client.Compact(ctx, st.Header.Revision, clientv3.WithCompactPhysical()); err != nil && !errors.Is(err, rpctypes.ErrCompacted) {
		return fmt.Errorf("compact: %w", err)
	}
	if err := s.defrag(ctx, ep); err != nil {
		return err
	}
	after, err := s.Client.Status(ctx, ep)
	if err != nil {
		return fmt.Errorf("status: %w", err)
	}
	fields["db_size_after"], fields["db_in_use_after"] = after.DbSize, after.DbSizeInUse
	if len(nospace) == 0 {
		log.WithFields(fields).Warn("etcd used more than half its quota: compacted all history and defragmented")
		return nil
	}
	if after.DbSize > quota-quota/5 {
		log.WithFields(fields).Error("etcd is out of space with live data: delete data or raise --etcd-quota-bytes and restart")
		return fmt.Errorf("%w: %d of %d bytes hold live data after compaction and defragmentation; delete data, or raise --etcd-quota-bytes and restart (the alarm is then disarmed at start-up)",
			ErrNoSpace, after.DbSizeInUse, quota)
	}
	for _, a := range nospace {
		if _, err := s.Client.AlarmDisarm(ctx, (*clientv3.AlarmMember)(a)); err != nil {
			return fmt.Errorf("disarm the NOSPACE alarm: %w", err)
		}
	}
	log.WithFields(fields).Warn("etcd was out of space: compacted, defragmented and disarmed the NOSPACE alarm")
	return nil
}

func (s *Store) defrag(ctx context.Context, ep string) error {
	if _, err := s.Client.Defragment(ctx, ep); err != nil {
		return fmt.Errorf("defragment: %w", err)
	}
	return nil
}
