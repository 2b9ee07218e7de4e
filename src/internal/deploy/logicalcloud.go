package deploy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/sirupsen/logrus"

	"github.com/argus-mc/argus/src/internal/appcontext"
	"github.com/argus-mc/argus/src/internal/catalog"
	"github.com/argus-mc/argus/src/internal/errdefs"
	"github.com/argus-mc/argus/src/internal/logicalcloud"
	"github.com/argus-mc/argus/src/internal/placement"
)

// Issuer gets standard clouds' user certificates issued.
type Issuer interface {
	Issue(req logicalcloud.Request)
	Cancel(project, cloud string)
}

// cloudTarget is where a DIG deploys: a namespace, the logical cloud whose
// credentials apply it ("" for the clusters' own) and the clusters the
// cloud includes (nil: any).
type cloudTarget struct {
	namespace string
	name      string
	label     string // for messages
	clusters  map[appcontext.ClusterRef]bool
}

// place resolves an app's placement within the cloud's clusters: an allOf
// cluster outside the cloud is refused (EMCO: the cloud must provide the
// mandatory clusters); anyOf chooses among the cloud's clusters only.
func (t cloudTarget) place(app string, intent catalog.PlacementIntent, clusters []placement.Cluster) ([]appcontext.ClusterRef, error) {
	if t.clusters == nil {
		refs, err := placement.Resolve(intent, clusters)
		if err != nil {
			return nil, fmt.Errorf("app %q: %w", app, err)
		}
		return refs, nil
	}
	inCloud := func(sel catalog.ClusterSelector) bool {
		return sel.Cluster == "" || t.clusters[appcontext.ClusterRef{Provider: sel.ClusterProvider, Name: sel.Cluster}]
	}
	for _, sel := range intent.AllOf {
		if !inCloud(sel) {
			return nil, errdefs.Invalid("app %q is placed on cluster %s+%s, which logical cloud %q does not include", app, sel.ClusterProvider, sel.Cluster, t.label)
		}
	}
	within := catalog.PlacementIntent{AllOf: intent.AllOf}
	for _, sel := range intent.AnyOf {
		if inCloud(sel) {
			within.AnyOf = append(within.AnyOf, sel)
		}
	}
	if len(intent.AnyOf) > 0 && len(within.AnyOf) == 0 {
		return nil, errdefs.Invalid("app %q: its anyOf names no cluster of logical cloud %q", app, t.label)
	}
	var candidates []placement.Cluster
	for _, c := range clusters {
		if t.clusters[c.Ref] {
			candidates = append(candidates, c)
		}
	}
	refs, err := placement.Resolve(within, candidates)
	if err != nil {
		return nil, fmt.Errorf("app %q in logical cloud %q: %w", app, t.label, err)
	}
	return refs, nil
}

// cloudFor resolves a DIG's logicalCloud. Empty — or "default" when the
// project has no cloud of that name — keeps what Argus always did: the
// clusters' own credentials and namespace "default". Otherwise the cloud
// must exist and be instantiated.
func (s *Service) cloudFor(ctx context.Context, project, name string) (cloudTarget, error) {
	if name == "" {
		return cloudTarget{namespace: Namespace}, nil
	}
	lc, err := catalog.For[catalog.LogicalCloudSpec](s.opts.Catalog, catalog.LogicalClouds).Get(ctx, catalog.Key{project, name})
	if errors.Is(err, errdefs.ErrNotFound) {
		if name == "default" {
			return cloudTarget{namespace: Namespace}, nil
		}
		return cloudTarget{}, errdefs.Invalid("logical cloud %q of project %q does not exist", name, project)
	}
	if err != nil {
		return cloudTarget{}, err
	}
	st, err := s.CloudStatus(ctx, catalog.Key{project, name})
	if err != nil {
		return cloudTarget{}, err
	}
	if st.Deployed != appcontext.Instantiated && st.Deployed != appcontext.Updated {
		why := ""
		if st.Reason != "" {
			why = " (" + st.Reason + ")"
		}
		return cloudTarget{}, errdefs.Conflict("logical cloud %q is %s%s; it must be Instantiated to deploy into it", name, orCreated(st.Deployed), why)
	}
	t := cloudTarget{namespace: logicalcloud.Namespace(lc.Spec), label: name, clusters: map[appcontext.ClusterRef]bool{}}
	if logicalcloud.Standard(lc.Spec) {
		t.name = name
	}
	for _, r := range st.References {
		t.clusters[appcontext.ClusterRef{Provider: r.Spec.ClusterProvider, Name: r.Spec.Cluster}] = true
	}
	return t, nil
}

func orCreated(s string) string {
	if s == "" {
		return catalog.StateCreated
	}
	return s
}

// CloudStatus reads a logical cloud's state.
func (s *Service) CloudStatus(ctx context.Context, key catalog.Key) (logicalcloud.State, error) {
	return logicalcloud.ReadState(ctx, s.opts.Catalog, s.opts.Contexts.Get, key)
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
	refs, placements, secrets, err := s.planCloud(ctx, key, lc)
	if err != nil {
		return "", err
	}
	id := appcontext.NewID()
	if _, err := s.opts.Catalog.Transition(ctx, cloudGroup(key), cloudSubject(key), from, s.action(catalog.StateInstantiated, id), id); err != nil {
		return "", err
	}
	meta := appcontext.Meta{ID: id, Kind: "lc", Group: cloudGroup(key), Project: key[0], Namespace: logicalcloud.Namespace(lc.Spec),
		StatusID: id, Created: s.opts.Now()}
	status := appcontext.Status{Status: appcontext.Instantiating, Updated: s.opts.Now()}
	if !logicalcloud.Standard(lc.Spec) {
		status.Status = appcontext.Instantiated // the clusters as they are: nothing to apply
	}
	if err := s.clearCertificates(ctx, key, refs); err != nil {
		return "", err
	}
	if err := s.opts.Contexts.Create(ctx, meta, status, placements); err != nil {
		return "", fmt.Errorf("record context: %w", err)
	}
	if logicalcloud.Standard(lc.Spec) {
		s.opts.Rsync.Instantiate(meta.Group, id)
		s.issue(key, lc.Spec, refs, secrets)
	}
	s.log.WithFields(logrus.Fields{"logicalCloud": strings.Join(key, "/"), "context": id, "level": lc.Spec.Level}).Info("instantiating logical cloud")
	return id, nil
}

// planCloud checks a cloud's cluster references and, for a standard
// cloud, renders its resources on each of them.
func (s *Service) planCloud(ctx context.Context, key catalog.Key, lc catalog.Object[catalog.LogicalCloudSpec]) (
	[]catalog.Object[catalog.ClusterReferenceSpec], []*appcontext.Placement, logicalcloud.Secrets, error) {
	cat := s.opts.Catalog
	refs, err := catalog.For[catalog.ClusterReferenceSpec](cat, catalog.ClusterReferences).List(ctx, key)
	if err != nil {
		return nil, nil, logicalcloud.Secrets{}, err
	}
	if len(refs) == 0 {
		return nil, nil, logicalcloud.Secrets{}, errdefs.Invalid("%s has no cluster references", cloudSubject(key))
	}
	for _, r := range refs {
		if _, err := catalog.For[catalog.Empty](cat, catalog.Clusters).Get(ctx, catalog.Key{r.Spec.ClusterProvider, r.Spec.Cluster}); err != nil {
			if errors.Is(err, errdefs.ErrNotFound) {
				return nil, nil, logicalcloud.Secrets{}, errdefs.Invalid("cluster reference %q names cluster %s+%s, which does not exist",
					r.Metadata.Name, r.Spec.ClusterProvider, r.Spec.Cluster)
			}
			return nil, nil, logicalcloud.Secrets{}, err
		}
	}
	if !logicalcloud.Standard(lc.Spec) {
		return refs, nil, logicalcloud.Secrets{}, nil
	}
	if s.opts.Issuer == nil {
		return nil, nil, logicalcloud.Secrets{}, errdefs.Unavailable(nil, "standard logical clouds are not available: no certificate issuer is configured")
	}
	perms, err := catalog.For[catalog.UserPermissionSpec](cat, catalog.UserPermissions).List(ctx, key)
	if err != nil {
		return nil, nil, logicalcloud.Secrets{}, err
	}
	quotas, err := catalog.For[catalog.ClusterQuotaSpec](cat, catalog.ClusterQuotas).List(ctx, key)
	if err != nil {
		return nil, nil, logicalcloud.Secrets{}, err
	}
	secrets, err := s.cloudSecrets(ctx, key, lc.Spec.User.UserName)
	if err != nil {
		return nil, nil, logicalcloud.Secrets{}, err
	}
	objs, err := logicalcloud.Resources(key[1], lc.Spec, perms, quotas, secrets.CSR)
	if err != nil {
		return nil, nil, logicalcloud.Secrets{}, err
	}
	var placements []*appcontext.Placement
	for _, r := range refs {
		rs := make([]appcontext.Resource, 0, len(objs))
		for _, o := range objs {
			manifest, err := json.Marshal(o.Object)
			if err != nil {
				return nil, nil, logicalcloud.Secrets{}, err
			}
			rs = append(rs, appcontext.Resource{GVK: o.GroupVersionKind(), Name: o.GetName(), Namespace: o.GetNamespace(), Manifest: manifest})
		}
		placements = append(placements, &appcontext.Placement{App: logicalcloud.App,
			Cluster: appcontext.ClusterRef{Provider: r.Spec.ClusterProvider, Name: r.Spec.Cluster}, Resources: rs})
	}
	return refs, placements, secrets, nil
}

// cloudSecrets returns the cloud's user key and request, made on first use
// and again if the user name changed.
func (s *Service) cloudSecrets(ctx context.Context, key catalog.Key, user string) (logicalcloud.Secrets, error) {
	clouds := catalog.For[catalog.LogicalCloudSpec](s.opts.Catalog, catalog.LogicalClouds)
	data, err := clouds.GetContent(ctx, key)
	if err != nil && !errors.Is(err, errdefs.ErrNotFound) {
		return logicalcloud.Secrets{}, err
	}
	if err == nil {
		sec, err := logicalcloud.DecodeSecrets(data)
		if err != nil {
			return sec, err
		}
		if sec.CSRUser() == user {
			return sec, nil
		}
	}
	sec, err := logicalcloud.NewSecrets(user)
	if err != nil {
		return sec, err
	}
	enc, err := sec.Encode()
	if err != nil {
		return sec, err
	}
	return sec, clouds.PutContent(ctx, key, enc)
}

// issue asks every cluster of a standard cloud for its user's certificate.
func (s *Service) issue(key catalog.Key, spec catalog.LogicalCloudSpec, refs []catalog.Object[catalog.ClusterReferenceSpec], sec logicalcloud.Secrets) {
	for _, r := range refs {
		if r.Spec.Certificate != "" {
			continue
		}
		s.opts.Issuer.Issue(logicalcloud.Request{Project: key[0], Cloud: key[1], Reference: r.Metadata.Name,
			Cluster: appcontext.ClusterRef{Provider: r.Spec.ClusterProvider, Name: r.Spec.Cluster},
			CSRName: logicalcloud.CSRName(key[1], spec.Namespace), CSR: sec.CSR})
	}
}

// clearCertificates forgets what clusters issued before: a new
// instantiation issues anew.
func (s *Service) clearCertificates(ctx context.Context, key catalog.Key, refs []catalog.Object[catalog.ClusterReferenceSpec]) error {
	res := catalog.For[catalog.ClusterReferenceSpec](s.opts.Catalog, catalog.ClusterReferences)
	for _, r := range refs {
		if r.Spec.Certificate == "" && r.Spec.CertificateError == "" {
			continue
		}
		r.Spec.Certificate, r.Spec.CertificateError = "", ""
		if err := res.Replace(ctx, append(append(catalog.Key{}, key...), r.Metadata.Name), r); err != nil && !errors.Is(err, errdefs.ErrNotFound) {
			return err
		}
	}
	return nil
}

// SetCertificate records what a cluster issued for a cloud's user (the
// Issuer's CertStore).
func (s *Service) SetCertificate(ctx context.Context, req logicalcloud.Request, certificate, failure string) error {
	res := catalog.For[catalog.ClusterReferenceSpec](s.opts.Catalog, catalog.ClusterReferences)
	key := catalog.Key{req.Project, req.Cloud, req.Reference}
	r, err := res.Get(ctx, key)
	if err != nil {
		return err
	}
	r.Spec.Certificate, r.Spec.CertificateError = certificate, failure
	if err := res.Replace(ctx, key, r); err != nil {
		return err
	}
	// The cloud's deployed status follows its certificates: its watchers
	// (emcoctl watch, subscriptions) are told through its context.
	st, err := s.opts.Catalog.GetState(ctx, cloudGroup(catalog.Key{req.Project, req.Cloud}))
	if err != nil || st.ContextID == "" {
		return err
	}
	return s.opts.Contexts.Touch(ctx, st.ContextID)
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
	if s.opts.Issuer != nil {
		s.opts.Issuer.Cancel(key[0], key[1])
	}
	refs, err := catalog.For[catalog.ClusterReferenceSpec](s.opts.Catalog, catalog.ClusterReferences).List(ctx, key)
	if err != nil {
		return err
	}
	if err := s.clearCertificates(ctx, key, refs); err != nil {
		return err
	}
	if !logicalcloud.Standard(lc.Spec) {
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
	refs, placements, secrets, err := s.planCloud(ctx, key, lc)
	if err != nil {
		return err
	}
	old, err := s.opts.Contexts.Get(ctx, st.ContextID)
	if err != nil {
		return err
	}
	if old.Meta.Namespace != logicalcloud.Namespace(lc.Spec) {
		return errdefs.Conflict("%s changed its namespace or level since it was instantiated; terminate and instantiate it instead", cloudSubject(key))
	}
	if _, err := s.opts.Catalog.Transition(ctx, cloudGroup(key), cloudSubject(key), from, s.action(catalog.StateUpdated, st.ContextID), ""); err != nil {
		return err
	}
	if !logicalcloud.Standard(lc.Spec) {
		return nil // nothing on the clusters
	}
	if err := s.applyUpdate(ctx, cloudGroup(key), old.Meta.ID, placements, nil); err != nil {
		return err
	}
	s.issue(key, lc.Spec, refs, secrets)
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
	if s.opts.Issuer != nil {
		s.opts.Issuer.Cancel(key[0], key[1])
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

// CloudSpecChangeable refuses changing a cloud's level, namespace or user
// while it is on its clusters.
func (s *Service) CloudSpecChangeable(ctx context.Context, key catalog.Key, next catalog.LogicalCloudSpec) error {
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
	return logicalcloud.Source{Catalog: s.opts.Catalog}.ForReference(ctx, project, cloud, reference)
}

// ResumeClouds asks again for the certificates a previous process was
// waiting for.
func (s *Service) ResumeClouds(ctx context.Context) error {
	if s.opts.Issuer == nil {
		return nil
	}
	return catalog.For[catalog.LogicalCloudSpec](s.opts.Catalog, catalog.LogicalClouds).Each(ctx, func(key catalog.Key, lc catalog.Object[catalog.LogicalCloudSpec]) error {
		return s.resumeCloud(ctx, key, lc)
	})
}

// ResumeCloud resumes the certificate requests of one logical cloud, named
// by its rsync group: what a replica that takes the group over does.
func (s *Service) ResumeCloud(ctx context.Context, group string) error {
	rest, ok := strings.CutPrefix(group, "lc:")
	project, cloud, ok2 := strings.Cut(rest, "/")
	if s.opts.Issuer == nil || !ok || !ok2 {
		return nil
	}
	key := catalog.Key{project, cloud}
	lc, err := catalog.For[catalog.LogicalCloudSpec](s.opts.Catalog, catalog.LogicalClouds).Get(ctx, key)
	if errors.Is(err, errdefs.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	return s.resumeCloud(ctx, key, lc)
}

func (s *Service) resumeCloud(ctx context.Context, key catalog.Key, lc catalog.Object[catalog.LogicalCloudSpec]) error {
	if !logicalcloud.Standard(lc.Spec) {
		return nil
	}
	st, err := s.CloudStatus(ctx, key)
	if err != nil {
		return err
	}
	if st.ContextStatus == "" || st.ContextStatus == appcontext.Terminated || st.ContextStatus == appcontext.Terminating ||
		(st.Lifecycle.Current != catalog.StateInstantiated && st.Lifecycle.Current != catalog.StateUpdated) {
		return nil
	}
	data, err := catalog.For[catalog.LogicalCloudSpec](s.opts.Catalog, catalog.LogicalClouds).GetContent(ctx, key)
	if err != nil {
		return err
	}
	sec, err := logicalcloud.DecodeSecrets(data)
	if err != nil {
		return err
	}
	var pending []catalog.Object[catalog.ClusterReferenceSpec]
	for _, r := range st.References {
		if r.Spec.Certificate == "" && r.Spec.CertificateError == "" {
			pending = append(pending, r)
		}
	}
	s.issue(key, lc.Spec, pending, sec)
	return nil
}
