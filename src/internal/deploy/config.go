package deploy

import (
	"context"
	"errors"
	"strconv"

	"github.com/argus-mc/argus/src/internal/catalog"
	"github.com/argus-mc/argus/src/internal/errdefs"
)

// The v1 config API (k8splugin's /v1/instance/{id}/config): a config
// renders a config template of the instance's definition with its own
// values and adds the result to the instance. Every change is an update
// of the instance through the same engine: the instance is re-rendered
// with its active configs and rsync applies the difference (and deletes
// what is no longer rendered). Each change is a version; rollback returns
// to one, tags name them.

// ConfigResult is k8splugin's answer to a config change.
type ConfigResult struct {
	InstanceID    string `json:"instance-id"`
	RBName        string `json:"rb-name"`
	RBVersion     string `json:"rb-version"`
	ProfileName   string `json:"profile-name"`
	ConfigName    string `json:"config-name"`
	TemplateName  string `json:"template-name"`
	ConfigVersion uint   `json:"config-version"`
}

// ConfigView is a config as k8splugin answers it: the content at a
// version, that version, and its tag.
type ConfigView struct {
	catalog.ConfigContent
	ConfigVersion uint   `json:"config-version"`
	ConfigTag     string `json:"config-tag"`
}

func configKey(id, name string) catalog.Key { return catalog.Key{id, name} }

// CreateConfig adds a config to an instance and applies it.
func (s *Service) CreateConfig(ctx context.Context, id string, c catalog.ConfigContent) (ConfigResult, error) {
	if c.ConfigName == "" || c.TemplateName == "" {
		return ConfigResult{}, errdefs.Invalid("config-name and template-name are required")
	}
	if err := catalog.ValidateName("config", c.ConfigName); err != nil {
		return ConfigResult{}, err
	}
	return s.changeConfig(ctx, id, c.ConfigName, func(cur *catalog.InstanceConfigSpec, exists bool) error {
		if exists {
			return errdefs.Conflict("config %s of instance %s already exists", c.ConfigName, id)
		}
		cur.History = append(cur.History, catalog.ConfigVersion{Action: catalog.ConfigCreated, Content: c})
		return nil
	})
}

// UpdateConfig gives a config new content and applies it.
func (s *Service) UpdateConfig(ctx context.Context, id, name string, c catalog.ConfigContent) (ConfigResult, error) {
	if c.ConfigName != "" && c.ConfigName != name {
		return ConfigResult{}, errdefs.Invalid("config-name %q does not match the name in the URL, %q", c.ConfigName, name)
	}
	c.ConfigName = name
	return s.changeConfig(ctx, id, name, func(cur *catalog.InstanceConfigSpec, exists bool) error {
		if !exists {
			return errdefs.NotFound("config %s of instance %s not found", name, id)
		}
		if c.TemplateName == "" {
			c.TemplateName = cur.History[len(cur.History)-1].Content.TemplateName
		}
		cur.History = append(cur.History, catalog.ConfigVersion{Action: catalog.ConfigUpdated, Content: c})
		return nil
	})
}

// DeleteConfig removes a config's resources and records that as a new
// version (k8splugin's POST .../config/{name}/delete); the config stays,
// so a rollback can bring them back.
func (s *Service) DeleteConfig(ctx context.Context, id, name string) (ConfigResult, error) {
	return s.changeConfig(ctx, id, name, func(cur *catalog.InstanceConfigSpec, exists bool) error {
		if !exists {
			return errdefs.NotFound("config %s of instance %s not found", name, id)
		}
		if !cur.Active() {
			return errdefs.Conflict("config %s of instance %s is already deleted", name, id)
		}
		last := cur.History[len(cur.History)-1].Content
		cur.History = append(cur.History, catalog.ConfigVersion{Action: catalog.ConfigDeleted, Content: last})
		return nil
	})
}

// RollbackConfig returns a config to an earlier version, given by number
// or by tag; the versions after it are dropped.
func (s *Service) RollbackConfig(ctx context.Context, id, name, version, tag string) (ConfigResult, error) {
	return s.changeConfig(ctx, id, name, func(cur *catalog.InstanceConfigSpec, exists bool) error {
		if !exists {
			return errdefs.NotFound("config %s of instance %s not found", name, id)
		}
		v, err := resolveVersion(*cur, version, tag)
		if err != nil {
			return err
		}
		if v < 1 || v >= cur.Current() {
			return errdefs.Invalid("cannot roll config %s back to version %d: it is at version %d", name, v, cur.Current())
		}
		cur.History = cur.History[:v]
		tags := cur.Tags[:0]
		for _, t := range cur.Tags {
			if t.Version <= v {
				tags = append(tags, t)
			}
		}
		cur.Tags = tags
		return nil
	})
}

// RemoveConfig deletes a config, its history and its resources
// (k8splugin's DELETE .../config/{name}).
func (s *Service) RemoveConfig(ctx context.Context, id, name string) error {
	unlock, err := s.lockInstance(ctx, id)
	if err != nil {
		return err
	}
	defer unlock()
	inst, configs, cur, err := s.configState(ctx, id, name)
	if err != nil {
		return err
	}
	if cur == nil {
		return errdefs.NotFound("config %s of instance %s not found", name, id)
	}
	if err := s.waitIdle(ctx, id); err != nil {
		return err
	}
	if err := s.configs().Delete(ctx, configKey(id, name)); err != nil {
		return err
	}
	rest := configs[:0]
	for _, c := range configs {
		if c.Metadata.Name != name {
			rest = append(rest, c)
		}
	}
	if _, err := s.reapply(ctx, inst, inst.Spec.Request, rest); err != nil {
		_, _ = s.configs().Put(context.WithoutCancel(ctx), configKey(id, name), *cur) // keep the record with its resources
		return err
	}
	return nil
}

// TagConfig names the config's current version.
func (s *Service) TagConfig(ctx context.Context, id, name, tag string) (catalog.ConfigTag, error) {
	if err := catalog.ValidateName("tag", tag); err != nil {
		return catalog.ConfigTag{}, err
	}
	unlock, err := s.lockInstance(ctx, id)
	if err != nil {
		return catalog.ConfigTag{}, err
	}
	defer unlock()
	_, _, cur, err := s.configState(ctx, id, name)
	if err != nil {
		return catalog.ConfigTag{}, err
	}
	if cur == nil {
		return catalog.ConfigTag{}, errdefs.NotFound("config %s of instance %s not found", name, id)
	}
	for _, t := range cur.Spec.Tags {
		if t.Tag == tag {
			return catalog.ConfigTag{}, errdefs.Conflict("config %s already has tag %s (version %d)", name, tag, t.Version)
		}
	}
	out := catalog.ConfigTag{Version: cur.Spec.Current(), Tag: tag}
	cur.Spec.Tags = append(cur.Spec.Tags, out)
	if _, err := s.configs().Put(ctx, configKey(id, name), *cur); err != nil {
		return catalog.ConfigTag{}, err
	}
	return out, nil
}

// changeConfig applies change to a config (exists tells whether there is
// one) and re-renders the instance with it; the record is written only if
// rendering and recording the update succeed.
func (s *Service) changeConfig(ctx context.Context, id, name string, change func(cur *catalog.InstanceConfigSpec, exists bool) error) (ConfigResult, error) {
	unlock, err := s.lockInstance(ctx, id)
	if err != nil {
		return ConfigResult{}, err
	}
	defer unlock()
	inst, configs, cur, err := s.configState(ctx, id, name)
	if err != nil {
		return ConfigResult{}, err
	}
	next := catalog.Object[catalog.InstanceConfigSpec]{Metadata: catalog.Metadata{Name: name}}
	if cur != nil {
		next.Spec.History = append(next.Spec.History, cur.Spec.History...)
		next.Spec.Tags = append(next.Spec.Tags, cur.Spec.Tags...)
	}
	if err := change(&next.Spec, cur != nil); err != nil {
		return ConfigResult{}, err
	}
	if err := s.waitIdle(ctx, id); err != nil {
		return ConfigResult{}, err
	}
	all := make([]catalog.Object[catalog.InstanceConfigSpec], 0, len(configs)+1)
	for _, c := range configs {
		if c.Metadata.Name != name {
			all = append(all, c)
		}
	}
	all = append(all, next)
	if _, err := s.configs().Put(ctx, configKey(id, name), next); err != nil {
		return ConfigResult{}, err
	}
	if _, err := s.reapply(ctx, inst, inst.Spec.Request, sortedConfigs(all)); err != nil {
		// Undo the record: the instance was not changed.
		undo := context.WithoutCancel(ctx)
		if cur != nil {
			_, _ = s.configs().Put(undo, configKey(id, name), *cur)
		} else {
			_ = s.configs().Delete(undo, configKey(id, name))
		}
		return ConfigResult{}, err
	}
	content := next.Spec.History[len(next.Spec.History)-1].Content
	req := inst.Spec.Request
	return ConfigResult{InstanceID: id, RBName: req.RBName, RBVersion: req.RBVersion, ProfileName: req.ProfileName,
		ConfigName: name, TemplateName: content.TemplateName, ConfigVersion: next.Spec.Current()}, nil
}

// configState reads an instance, its configs and the named one (nil when
// it has none of that name).
func (s *Service) configState(ctx context.Context, id, name string) (catalog.Object[catalog.InstanceSpec], []catalog.Object[catalog.InstanceConfigSpec], *catalog.Object[catalog.InstanceConfigSpec], error) {
	inst, err := s.instances().Get(ctx, catalog.Key{id})
	if err != nil {
		return inst, nil, nil, err
	}
	configs, err := s.configs().List(ctx, catalog.Key{id})
	if err != nil {
		return inst, nil, nil, err
	}
	for i := range configs {
		if configs[i].Metadata.Name == name {
			c := configs[i]
			return inst, configs, &c, nil
		}
	}
	return inst, configs, nil, nil
}

func resolveVersion(c catalog.InstanceConfigSpec, version, tag string) (uint, error) {
	if tag != "" {
		for _, t := range c.Tags {
			if t.Tag == tag {
				return t.Version, nil
			}
		}
		return 0, errdefs.NotFound("config has no tag %s", tag)
	}
	if version == "" {
		return 0, errdefs.Invalid("give anyOf.config-version or anyOf.config-tag")
	}
	v, err := strconv.ParseUint(version, 10, 32)
	if err != nil {
		return 0, errdefs.InvalidWrap(err, "config-version %q", version)
	}
	return uint(v), nil
}

// ---- reads ----

// ListConfigs lists an instance's configs at their current versions.
func (s *Service) ListConfigs(ctx context.Context, id string) ([]ConfigView, error) {
	list, err := s.configs().List(ctx, catalog.Key{id})
	if err != nil {
		return nil, err
	}
	out := make([]ConfigView, 0, len(list))
	for _, c := range list {
		out = append(out, viewAt(c.Spec, c.Spec.Current()))
	}
	return out, nil
}

// GetConfig returns a config at its current version, or at the version
// given by number or by tag.
func (s *Service) GetConfig(ctx context.Context, id, name, version, tag string) (ConfigView, error) {
	c, err := s.getConfig(ctx, id, name)
	if err != nil {
		return ConfigView{}, err
	}
	v := c.Current()
	if version != "" || tag != "" {
		if v, err = resolveVersion(c, version, tag); err != nil {
			return ConfigView{}, err
		}
	}
	if v < 1 || v > c.Current() {
		return ConfigView{}, errdefs.NotFound("config %s has no version %d", name, v)
	}
	return viewAt(c, v), nil
}

// ConfigVersions lists every version of a config.
func (s *Service) ConfigVersions(ctx context.Context, id, name string) ([]ConfigView, error) {
	c, err := s.getConfig(ctx, id, name)
	if err != nil {
		return nil, err
	}
	out := make([]ConfigView, 0, len(c.History))
	for v := uint(1); v <= c.Current(); v++ {
		out = append(out, viewAt(c, v))
	}
	return out, nil
}

// ConfigTags lists a config's tags.
func (s *Service) ConfigTags(ctx context.Context, id, name string) ([]catalog.ConfigTag, error) {
	c, err := s.getConfig(ctx, id, name)
	if err != nil {
		return nil, err
	}
	return append([]catalog.ConfigTag{}, c.Tags...), nil
}

func (s *Service) getConfig(ctx context.Context, id, name string) (catalog.InstanceConfigSpec, error) {
	if _, err := s.instances().Get(ctx, catalog.Key{id}); err != nil {
		return catalog.InstanceConfigSpec{}, err
	}
	c, err := s.configs().Get(ctx, configKey(id, name))
	if errors.Is(err, errdefs.ErrNotFound) {
		return catalog.InstanceConfigSpec{}, errdefs.NotFound("config %s of instance %s not found", name, id)
	}
	return c.Spec, err
}

func viewAt(c catalog.InstanceConfigSpec, v uint) ConfigView {
	out := ConfigView{ConfigContent: c.History[v-1].Content, ConfigVersion: v}
	if out.Values == nil {
		out.Values = catalog.Values{}
	}
	for _, t := range c.Tags {
		if t.Version == v {
			out.ConfigTag = t.Tag
		}
	}
	return out
}
