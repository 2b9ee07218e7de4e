package deploy

import (
	"context"
	"errors"
	"time"

	"github.com/sirupsen/logrus"

	"github.com/argus-mc/argus/src/internal/appcontext"
	"github.com/argus-mc/argus/src/internal/catalog"
	"github.com/argus-mc/argus/src/internal/errdefs"
)

// lostReason is the error of a context recreated by RepairLifecycles.
const lostReason = "the orchestrator stopped between recording this instantiation and its context: nothing was deployed; terminate and instantiate again"

// RepairLifecycles gives every lifecycle that names a context which does
// not exist (its instantiate recorded the lifecycle, and the process was
// killed before it recorded the context) a context that says so: failed,
// with nothing to apply, so the DIG or logical cloud shows why and can be
// terminated and instantiated again. Only actions older than before are
// judged, so an instantiate running on another replica is left alone. It
// returns how many it repaired.
func (s *Service) RepairLifecycles(ctx context.Context, before time.Time) (int, error) {
	repaired := 0
	err := s.opts.Catalog.EachState(ctx, func(group string, st catalog.DIGState) error {
		meta, ok := lostMeta(group, st, before)
		if !ok {
			return nil
		}
		_, err := s.opts.Contexts.Get(ctx, st.ContextID)
		if !errors.Is(err, errdefs.ErrNotFound) {
			return err // there (nil), or unknown
		}
		status := appcontext.Status{Status: appcontext.InstantiateFailed, Error: lostReason, Updated: s.opts.Now()}
		if st.Current == catalog.StateTerminated || st.Current == catalog.StateTerminateStopped {
			status.Status = appcontext.Terminated
		}
		if err := s.opts.Contexts.Create(ctx, meta, status, nil); err != nil {
			return err
		}
		s.log.WithFields(logrus.Fields{"group": group, "context": st.ContextID, "state": st.Current}).
			Warn("recorded the context an instantiation lost when its process was killed, as failed")
		repaired++
		return nil
	})
	return repaired, err
}

// lostMeta is the meta of the context a lifecycle names, when the action
// that recorded it is older than before; false for lifecycles it does not
// judge (no context, a recent action, a kind without one).
func lostMeta(group string, st catalog.DIGState, before time.Time) (appcontext.Meta, bool) {
	if st.ContextID == "" {
		return appcontext.Meta{}, false
	}
	recorded := false
	for _, a := range st.Actions {
		if a.ContextID == st.ContextID && a.State == catalog.StateInstantiated {
			recorded = a.TimeStamp.Before(before)
			break
		}
	}
	if !recorded {
		return appcontext.Meta{}, false
	}
	statusID := st.StatusContextID
	if statusID == "" {
		statusID = st.ContextID
	}
	meta := appcontext.Meta{ID: st.ContextID, Group: group, StatusID: statusID, Namespace: Namespace, Created: before}
	g, _ := catalog.ParseGroup(group)
	switch g.Kind {
	case catalog.GroupDIG:
		meta.Kind, meta.Project, meta.CompositeApp, meta.Version, meta.DIG = "dig", g.Key[0], g.Key[1], g.Key[2], g.Key[3]
	case catalog.GroupLogicalCloud:
		meta.Kind, meta.Project = "lc", g.Key[0]
	default:
		return appcontext.Meta{}, false
	}
	return meta, true
}
