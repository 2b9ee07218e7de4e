package appcontext

import "context"

// ReplaceForUpdate records a new plan in an existing context — new and
// changed resources, old ones marked removed (MergeForUpdate), meta when
// not nil — with the status Updating, for rsync to apply. The caller has
// stopped rsync's action on the group first: the plan is merged with a
// settled context.
func (s *Store) ReplaceForUpdate(ctx context.Context, id string, fresh []*Placement, meta *Meta) error {
	old, err := s.Get(ctx, id)
	if err != nil {
		return err
	}
	return s.Replace(ctx, id, MergeForUpdate(old, fresh), meta, Status{Status: Updating})
}

// MergeForUpdate returns the new placements plus, marked Removed, every old
// resource the new plan no longer has.
func MergeForUpdate(old *Context, fresh []*Placement) []*Placement {
	out := fresh
	for _, op := range old.Placements {
		var np *Placement
		for _, p := range fresh {
			if p.App == op.App && p.Cluster == op.Cluster {
				np = p
			}
		}
		if np == nil {
			np = &Placement{App: op.App, Cluster: op.Cluster}
			out = append(out, np)
		}
		keep := map[string]bool{}
		for _, r := range np.Resources {
			keep[r.Key()] = true
		}
		for _, r := range op.Resources {
			if !keep[r.Key()] && op.StatusOf(r.Key()).Status != RsyncDeleted {
				r.Removed = true
				np.Resources = append(np.Resources, r)
			}
		}
	}
	return out
}
