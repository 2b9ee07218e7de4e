package monitor

import (
	"context"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// heartbeat renews the monitor's Lease every RenewInterval until ctx ends.
// The orchestrator watches renewTime: a Lease that stops moving means a
// silent monitor, whatever the clocks say.
func (m *Monitor) heartbeat(ctx context.Context) {
	ticker := time.NewTicker(m.opts.RenewInterval)
	defer ticker.Stop()
	for {
		if err := m.renewLease(ctx); err != nil && ctx.Err() == nil {
			m.log.WithError(err).Warn("lease renewal failed; retrying at the next interval")
		}
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
	}
}

func (m *Monitor) renewLease(ctx context.Context) error {
	leases := m.kube.CoordinationV1().Leases(m.opts.LeaseNamespace)
	now := metav1.NewMicroTime(time.Now())
	duration := int32(m.opts.LeaseDuration / time.Second)
	lease, err := leases.Get(ctx, m.opts.LeaseName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		_, err = leases.Create(ctx, &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: m.opts.LeaseName, Namespace: m.opts.LeaseNamespace,
				Labels: map[string]string{"app.kubernetes.io/name": "argus-monitor"}},
			Spec: coordinationv1.LeaseSpec{
				HolderIdentity:       ptr.To(m.opts.Identity),
				LeaseDurationSeconds: ptr.To(duration),
				AcquireTime:          &now,
				RenewTime:            &now,
			},
		}, metav1.CreateOptions{FieldManager: fieldManager})
		return err
	}
	if err != nil {
		return err
	}
	lease = lease.DeepCopy() // never mutate what a client may share
	if lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity != m.opts.Identity {
		lease.Spec.HolderIdentity = ptr.To(m.opts.Identity)
		lease.Spec.AcquireTime = &now
		lease.Spec.LeaseTransitions = ptr.To(ptr.Deref(lease.Spec.LeaseTransitions, 0) + 1)
	}
	lease.Spec.LeaseDurationSeconds = ptr.To(duration)
	lease.Spec.RenewTime = &now
	_, err = leases.Update(ctx, lease, metav1.UpdateOptions{FieldManager: fieldManager})
	return err
}
