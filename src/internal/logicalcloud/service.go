package logicalcloud

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/sirupsen/logrus"
	"go.mongodb.org/mongo-driver/bson"

	"github.com/argus-mc/argus/src/internal/appcontext"
	"github.com/argus-mc/argus/src/internal/catalog"
	"github.com/argus-mc/argus/src/internal/errdefs"
	"github.com/argus-mc/argus/src/internal/logging"
)

// Rsync is the part of rsync a cloud's lifecycle drives (rsync.Dispatcher).
type Rsync interface {
	Instantiate(group, id string)
	Update(group, id string)
	Terminate(group, id string)
	Stop(group string) bool
	Busy(group string) bool
}

// ServiceOptions configures a Service; Catalog, Contexts and Rsync are
// required.
type ServiceOptions struct {
	Catalog  *catalog.Catalog
	Contexts *appcontext.Store
	Rsync    Rsync
	// Clients reach the clusters whose signers issue standard clouds'
	// users' certificates; nil leaves only admin clouds available.
	Clients Clients
	// Owns reports whether this replica owns a group: a cloud's
	// certificates are issued and renewed by the owner of its
	// "lc:<project>/<cloud>" group alone (Keeper). Required with Clients.
	Owns func(group string) bool
	// CertTTL is the lifetime asked for a user's certificates (the CSR's
	// expirationSeconds; clusters may cap it); 0 means DefaultCertTTL.
	CertTTL time.Duration
	// ReservedUsers are user name prefixes no cloud may have, beside
	// Kubernetes' own system: (CheckUser).
	ReservedUsers []string
	// Issuer tunes the issuance (timeout, backoff, renewal); its Clients
	// and Store are the Keeper's.
	Issuer IssuerOptions
	Logger *logrus.Entry
	Now    func() time.Time
}

// Service runs logical cloud lifecycle actions (EMCO's dcm: instantiate,
// update, terminate, stop) and guards the changes to a cloud (user names:
// never reserved, never another cloud's). A standard cloud's resources go
// to its clusters through rsync, like a DIG's, and its Keeper, on the
// replica owning the cloud, gets the user's certificate from each of them
// and keeps it renewed.
type Service struct {
	opts   ServiceOptions
	log    *logrus.Entry
	keeper *Keeper // nil without Clients
}

// NewService returns a Service; its Keeper (with Clients) does the
// certificate work once it runs.
func NewService(opts ServiceOptions) (*Service, error) {
	if opts.Catalog == nil || opts.Contexts == nil || opts.Rsync == nil {
		return nil, errors.New("logicalcloud: Catalog, Contexts and Rsync are required")
	}
	if opts.Logger == nil {
		opts.Logger = logrus.NewEntry(logging.Discard())
	}
	if opts.Now == nil {
		opts.Now = func() time.Time { return time.Now().UTC() }
	}
	if opts.CertTTL == 0 {
		opts.CertTTL = DefaultCertTTL
	}
	s := &Service{opts: opts, log: opts.Logger}
	if opts.Clients != nil {
		k, err := newKeeper(keeperOptions{Catalog: opts.Catalog, Contexts: opts.Contexts.Get, Touch: opts.Contexts.Touch,
			Clients: opts.Clients, Issuer: opts.Issuer, Owns: opts.Owns, CertTTL: opts.CertTTL,
			Logger: opts.Logger.WithField("component", "keeper")})
		if err != nil {
			return nil, err
		}
		s.keeper = k
	}
	return s, nil
}

// Keeper is the certificate work of standard clouds, nil without Clients:
// its owner runs it and tells it of changed contexts and of the groups
// this replica acquires and releases.
func (s *Service) Keeper() *Keeper { return s.keeper }

func (s *Service) action(state, contextID string) catalog.StateAction {
	return catalog.StateAction{State: state, ContextID: contextID, TimeStamp: s.opts.Now()}
}

func orCreated(s string) string {
	if s == "" {
		return catalog.StateCreated
	}
	return s
}

// CloudStatus reads a logical cloud's state.
func (s *Service) CloudStatus(ctx context.Context, key catalog.Key) (State, error) {
	return ReadState(ctx, s.opts.Catalog, s.opts.Contexts.Get, key)
}

func cloudGroup(key catalog.Key) string { return catalog.LogicalCloudGroup(key[0], key[1]) }

func cloudSubject(key catalog.Key) string { return fmt.Sprintf("logical cloud %q", key[1]) }

// InstantiateCloud puts a logical cloud on its clusters: nothing for an
// admin cloud (it is Instantiated at once); for a standard cloud its
// resources through rsync, and its user's certificate from every cluster.
func (s *Service) InstantiateCloud(ctx context.Context, key catalog.Key) (string, error) {
	lc, err := catalog.For[catalog.LogicalCloudSpec](s.opts.Catalog, catalog.LogicalClouds).Get(ctx, key)
	if err != nil {
		return "", err
	}
	from := []string{catalog.StateCreated, catalog.StateTerminated}
	st, err := s.opts.Catalog.GetState(ctx, cloudGroup(key))
	if err != nil {
		return "", err
	}
	if !slices.Contains(from, st.Current) {
		return "", errdefs.Conflict("%s is %s; instantiate needs it to be Created or Terminated", cloudSubject(key), st.Current)
	}
	if s.opts.Rsync.Busy(cloudGroup(key)) {
		return "", errdefs.Conflict("%s is still being terminated; try again when it is done", cloudSubject(key))
	}
	refs, placements, err := s.planCloud(ctx, key, lc)
	if err != nil {
		return "", err
	}
	id := appcontext.NewID()
	if Standard(lc.Spec) {
		if err := s.userFree(ctx, key, lc.Spec.User.UserName); err != nil {
			return "", err
		}
	}
	if _, err := s.opts.Catalog.Transition(ctx, cloudGroup(key), cloudSubject(key), from, s.action(catalog.StateInstantiated, id), id); err != nil {
		return "", err
	}
	meta := appcontext.Meta{ID: id, Kind: "lc", Group: cloudGroup(key), Project: key[0], Namespace: Namespace(lc.Spec),
		StatusID: id, Created: s.opts.Now()}
	status := appcontext.Status{Status: appcontext.Instantiating, Updated: s.opts.Now()}
	if !Standard(lc.Spec) {
		status.Status = appcontext.Instantiated // the clusters as they are: nothing to apply
	}
	if err := ForgetCertificates(ctx, s.opts.Catalog, key, refs); err != nil {
		return "", err
	}
	if err := s.opts.Contexts.Create(ctx, meta, status, placements); err != nil {
		return "", fmt.Errorf("record context: %w", err)
	}
	if Standard(lc.Spec) {
		// The cloud's owner has the certificates issued as it sees the
		// context (Keeper).
		s.opts.Rsync.Instantiate(meta.Group, id)
	}
	s.log.WithFields(logrus.Fields{"logicalCloud": strings.Join(key, "/"), "context": id, "level": lc.Spec.Level}).Info("instantiating logical cloud")
	return id, nil
}

// planCloud checks a cloud's cluster references and, for a standard
// cloud, renders its resources on each of them.
func (s *Service) planCloud(ctx context.Context, key catalog.Key, lc catalog.Object[catalog.LogicalCloudSpec]) (
	[]catalog.Object[catalog.ClusterReferenceSpec], []*appcontext.Placement, error) {
	cat := s.opts.Catalog
	refs, err := catalog.For[catalog.ClusterReferenceSpec](cat, catalog.ClusterReferences).List(ctx, key)
	if err != nil {
		return nil, nil, err
	}
	if len(refs) == 0 {
		return nil, nil, errdefs.Invalid("%s has no cluster references", cloudSubject(key))
	}
	for _, r := range refs {
		if _, err := catalog.For[catalog.Empty](cat, catalog.Clusters).Get(ctx, catalog.Key{r.Spec.ClusterProvider, r.Spec.Cluster}); err != nil {
			if errors.Is(err, errdefs.ErrNotFound) {
				return nil, nil, errdefs.Invalid("cluster reference %q names cluster %s+%s, which does not exist",
					r.Metadata.Name, r.Spec.ClusterProvider, r.Spec.Cluster)
			}
			return nil, nil, err
		}
	}
	if !Standard(lc.Spec) {
		return refs, nil, nil
	}
	if s.keeper == nil {
		return nil, nil, errdefs.Unavailable(nil, "standard logical clouds are not available: no certificate issuer is configured")
	}
	perms, err := catalog.For[catalog.UserPermissionSpec](cat, catalog.UserPermissions).List(ctx, key)
	if err != nil {
		return nil, nil, err
	}
	quotas, err := catalog.For[catalog.ClusterQuotaSpec](cat, catalog.ClusterQuotas).List(ctx, key)
	if err != nil {
		return nil, nil, err
	}
	secrets, err := s.cloudSecrets(ctx, key, lc.Spec.User.UserName)
	if err != nil {
		return nil, nil, err
	}
	objs, err := Resources(Cloud{Name: key[1], Spec: lc.Spec, Perms: perms, Quotas: quotas,
		CSR: secrets.CSR, CertTTL: s.opts.CertTTL})
	if err != nil {
		return nil, nil, err
	}
	var placements []*appcontext.Placement
	for _, r := range refs {
		rs := make([]appcontext.Resource, 0, len(objs))
		for _, o := range objs {
			manifest, err := json.Marshal(o.Object)
			if err != nil {
				return nil, nil, err
			}
			// The namespace is the cloud's alone: never one that exists
			// already (docs/security.md), and its roles wait for it.
			rs = append(rs, appcontext.Resource{GVK: o.GroupVersionKind(), Name: o.GetName(), Namespace: o.GetNamespace(), Manifest: manifest,
				Exclusive: o.GetKind() == "Namespace"})
		}
		placements = append(placements, &appcontext.Placement{App: App,
			Cluster: appcontext.ClusterRef{Provider: r.Spec.ClusterProvider, Name: r.Spec.Cluster}, Resources: rs})
	}
	return refs, placements, nil
}

// cloudSecrets returns the cloud's user key and request, made on first use
// and again if the user name changed.
func (s *Service) cloudSecrets(ctx context.Context, key catalog.Key, user string) (Secrets, error) {
	clouds := catalog.For[catalog.LogicalCloudSpec](s.opts.Catalog, catalog.LogicalClouds)
	data, err := clouds.GetContent(ctx, key)
	if err != nil && !errors.Is(err, errdefs.ErrNotFound) {
		return Secrets{}, err
	}
	if err == nil {
		sec, err := DecodeSecrets(data)
		if err != nil {
			return sec, err
		}
		if sec.CSRUser() == user {
			return sec, nil
		}
	}
	sec, err := NewSecrets(user)
	if err != nil {
		return sec, err
	}
	enc, err := sec.Encode()
	if err != nil {
		return sec, err
	}
	return sec, clouds.PutContent(ctx, key, enc)
}

// TerminateCloud removes a logical cloud from its clusters. A cloud that a
// deployed DIG still uses is refused.
func (s *Service) TerminateCloud(ctx context.Context, key catalog.Key) error {
	lc, err := catalog.For[catalog.LogicalCloudSpec](s.opts.Catalog, catalog.LogicalClouds).Get(ctx, key)
	if err != nil {
		return err
	}
	if err := s.cloudUnused(ctx, key); err != nil {
		return err
	}
	from := []string{catalog.StateInstantiated, catalog.StateUpdated, catalog.StateInstantiateStopped, catalog.StateTerminateStopped}
	cur, err := s.opts.Catalog.GetState(ctx, cloudGroup(key))
	if err != nil {
		return err
	}
	st, err := s.opts.Catalog.Transition(ctx, cloudGroup(key), cloudSubject(key), from, s.action(catalog.StateTerminated, cur.ContextID), "")
	if err != nil {
		return err
	}
	// The owner stops the issuance and clears again what it may still
	// store meanwhile (Keeper); this makes the kubeconfigs
	// go at once.
	refs, err := catalog.For[catalog.ClusterReferenceSpec](s.opts.Catalog, catalog.ClusterReferences).List(ctx, key)
	if err != nil {
		return err
	}
	if err := ForgetCertificates(ctx, s.opts.Catalog, key, refs); err != nil {
		return err
	}
	if !Standard(lc.Spec) {
		return s.opts.Contexts.SetStatus(ctx, st.ContextID, appcontext.Status{Status: appcontext.Terminated})
	}
	s.opts.Rsync.Terminate(cloudGroup(key), st.ContextID)
	return nil
}

// cloudUnused refuses while a deployed DIG of the project names the cloud.
func (s *Service) cloudUnused(ctx context.Context, key catalog.Key) error {
	var inUse []string
	err := catalog.For[catalog.DIGSpec](s.opts.Catalog, catalog.DeploymentIntentGroups).Each(ctx, func(dig catalog.Key, o catalog.Object[catalog.DIGSpec]) error {
		if dig[0] != key[0] || o.Spec.LogicalCloud != key[1] {
			return nil
		}
		st, err := s.opts.Catalog.GetDIGState(ctx, dig)
		if err != nil {
			return err
		}
		switch st.Current {
		case catalog.StateInstantiated, catalog.StateUpdated, catalog.StateInstantiateStopped, catalog.StateTerminateStopped:
			inUse = append(inUse, strings.Join(dig[1:], "/"))
		}
		return nil
	})
	if err != nil {
		return err
	}
	if len(inUse) > 0 {
		return errdefs.Conflict("%s is in use by deployed deployment intent groups %s; terminate them first", cloudSubject(key), strings.Join(inUse, ", "))
	}
	return nil
}

// UpdateCloud applies a cloud's changed cluster references, quotas and
// permissions: new clusters get the cloud (and issue its user's
// certificate), clusters no longer referenced lose it.
func (s *Service) UpdateCloud(ctx context.Context, key catalog.Key) error {
	lc, err := catalog.For[catalog.LogicalCloudSpec](s.opts.Catalog, catalog.LogicalClouds).Get(ctx, key)
	if err != nil {
		return err
	}
	from := []string{catalog.StateInstantiated, catalog.StateUpdated}
	st, err := s.opts.Catalog.GetState(ctx, cloudGroup(key))
	if err != nil {
		return err
	}
	if !slices.Contains(from, st.Current) {
		return errdefs.Conflict("%s is %s; update needs it to be Instantiated or Updated", cloudSubject(key), st.Current)
	}
	if s.opts.Rsync.Busy(cloudGroup(key)) {
		return errdefs.Conflict("an action on %s is still in progress; try again when it is done", cloudSubject(key))
	}
	_, placements, err := s.planCloud(ctx, key, lc)
	if err != nil {
		return err
	}
	old, err := s.opts.Contexts.Get(ctx, st.ContextID)
	if err != nil {
		return err
	}
	if old.Meta.Namespace != Namespace(lc.Spec) {
		return errdefs.Conflict("%s changed its namespace or level since it was instantiated; terminate and instantiate it instead", cloudSubject(key))
	}
	if _, err := s.opts.Catalog.Transition(ctx, cloudGroup(key), cloudSubject(key), from, s.action(catalog.StateUpdated, st.ContextID), ""); err != nil {
		return err
	}
	if !Standard(lc.Spec) {
		return nil // nothing on the clusters
	}
	// New clusters get their certificates from the owner, which sees the
	// context change (Keeper).
	s.opts.Rsync.Stop(cloudGroup(key)) // the plan is merged with a settled context
	if err := s.opts.Contexts.ReplaceForUpdate(ctx, old.Meta.ID, placements, nil); err != nil {
		return err
	}
	s.opts.Rsync.Update(cloudGroup(key), old.Meta.ID)
	return nil
}

// StopCloud cancels the instantiation, update or termination in flight.
func (s *Service) StopCloud(ctx context.Context, key catalog.Key) error {
	if _, err := catalog.For[catalog.LogicalCloudSpec](s.opts.Catalog, catalog.LogicalClouds).Get(ctx, key); err != nil {
		return err
	}
	st, err := s.opts.Catalog.GetState(ctx, cloudGroup(key))
	if err != nil {
		return err
	}
	if !s.opts.Rsync.Busy(cloudGroup(key)) {
		return errdefs.Conflict("%s is %s and no action is in progress to stop", cloudSubject(key), orCreated(st.Current))
	}
	next, status := catalog.StateInstantiateStopped, appcontext.InstantiateFailed
	if st.Current == catalog.StateTerminated {
		next, status = catalog.StateTerminateStopped, appcontext.TerminateFailed
	}
	if _, err := s.opts.Catalog.Transition(ctx, cloudGroup(key), cloudSubject(key), []string{catalog.StateInstantiated, catalog.StateUpdated, catalog.StateTerminated},
		s.action(next, st.ContextID), ""); err != nil {
		return err
	}
	if !s.opts.Rsync.Stop(cloudGroup(key)) {
		return nil
	}
	return s.opts.Contexts.SetStatus(ctx, st.ContextID, appcontext.Status{Status: status, Error: "stopped by the user"})
}

// CloudDeletable refuses to delete a cloud that is on its clusters.
func (s *Service) CloudDeletable(ctx context.Context, key catalog.Key) error {
	st, err := s.opts.Catalog.GetState(ctx, cloudGroup(key))
	if err != nil {
		return err
	}
	switch st.Current {
	case catalog.StateCreated, catalog.StateTerminated:
		if s.opts.Rsync.Busy(cloudGroup(key)) {
			return errdefs.Conflict("%s is still being terminated; delete it when that is done", cloudSubject(key))
		}
		return nil
	}
	return errdefs.Conflict("%s is %s; terminate it before deleting it", cloudSubject(key), st.Current)
}

// CloudDeleted removes a deleted cloud's lifecycle record.
func (s *Service) CloudDeleted(ctx context.Context, key catalog.Key) error {
	return s.opts.Catalog.DeleteState(ctx, cloudGroup(key))
}

// CloudChangeable refuses changing a cloud's references while an action
// on it is in flight (EMCO: only when Instantiated or Terminated).
func (s *Service) CloudChangeable(ctx context.Context, key catalog.Key) error {
	if s.opts.Rsync.Busy(cloudGroup(key)) {
		return errdefs.Conflict("%s is being instantiated, updated or terminated; change it when that is done", cloudSubject(key))
	}
	return nil
}

// userFree refuses a user name another standard cloud (of any project)
// has: one user, one cloud, or a cloud's certificate would act as
// another's user. Checked when a cloud is written and again when it is
// instantiated, so two clouds written at once with one name both stay
// uninstantiable until one goes.
func (s *Service) userFree(ctx context.Context, key catalog.Key, user string) error {
	n, err := catalog.For[catalog.LogicalCloudSpec](s.opts.Catalog, catalog.LogicalClouds).CountWhere(ctx, bson.M{
		"spec.user.userName": user, "spec.level": bson.M{"$ne": catalog.LevelAdmin},
		"$or": bson.A{bson.M{"project": bson.M{"$ne": key[0]}}, bson.M{"logicalcloud": bson.M{"$ne": key[1]}}}})
	if err != nil {
		return err
	}
	if n > 0 {
		return errdefs.Conflict("user name %q belongs to another logical cloud: each standard cloud needs a user of its own", user)
	}
	return nil
}

// CloudSpecChangeable refuses a cloud's user when it is reserved or
// another cloud's, and changing its level, namespace or user while it is
// on its clusters.
func (s *Service) CloudSpecChangeable(ctx context.Context, key catalog.Key, next catalog.LogicalCloudSpec) error {
	if Standard(next) {
		if err := CheckUser(next.User.UserName, s.opts.ReservedUsers); err != nil {
			return err
		}
		if err := s.userFree(ctx, key, next.User.UserName); err != nil {
			return err
		}
	}
	lc, err := catalog.For[catalog.LogicalCloudSpec](s.opts.Catalog, catalog.LogicalClouds).Get(ctx, key)
	if errors.Is(err, errdefs.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	st, err := s.opts.Catalog.GetState(ctx, cloudGroup(key))
	if err != nil {
		return err
	}
	if st.Current == catalog.StateCreated || st.Current == catalog.StateTerminated {
		return nil
	}
	cur := lc.Spec
	if cur.Level != next.Level || cur.Namespace != next.Namespace || cur.User.UserName != next.User.UserName {
		return errdefs.Conflict("%s is %s: its level, namespace and user cannot change until it is terminated", cloudSubject(key), st.Current)
	}
	return nil
}

// Kubeconfig is a standard cloud's user's kubeconfig on a reference's
// cluster.
func (s *Service) Kubeconfig(ctx context.Context, project, cloud, reference string) ([]byte, error) {
	return Source{Catalog: s.opts.Catalog}.ForReference(ctx, project, cloud, reference)
}
