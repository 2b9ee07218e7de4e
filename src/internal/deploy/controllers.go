package deploy

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/argus-mc/argus/src/internal/catalog"
	"github.com/argus-mc/argus/src/internal/errdefs"
)

// Intent types (controller names) a DIG's intents may use. Argus carries
// out placement and the generic action controller itself; EMCO's other
// controllers (dtc, ovnaction, hpa, sfc, ...) are not implemented, and an
// intent naming one is refused rather than ignored.
const (
	IntentPlacement = "genericPlacementIntent"
	IntentGAC       = "gac"
	// IntentGACLong is the generic action controller's long name, which
	// some EMCO documents use for the intent key.
	IntentGACLong = "genericActionController"
)

// Implemented lists the intent types Argus carries out.
func Implemented() []string { return []string{IntentPlacement, IntentGAC, IntentGACLong} }

func isGAC(intentType string) bool { return intentType == IntentGAC || intentType == IntentGACLong }

// ValidateIntent checks a DIG intent's types and names: each type must be
// one Argus implements.
func ValidateIntent(spec catalog.DIGIntentSpec) error {
	if len(spec.Intent) == 0 {
		return errdefs.Invalid("spec.intent names no intent")
	}
	types := make([]string, 0, len(spec.Intent))
	for t := range spec.Intent {
		types = append(types, t)
	}
	sort.Strings(types)
	for _, t := range types {
		if t != IntentPlacement && !isGAC(t) {
			return errdefs.Invalid("intent type %q names controller %q, which Argus does not implement (it implements %s); remove the intent",
				t, t, strings.Join(Implemented(), ", "))
		}
		if err := catalog.ValidateName(t+" intent", spec.Intent[t]); err != nil {
			return err
		}
	}
	return nil
}

// digIntents reads a DIG's intents, checks them again (they may predate
// this check) and that every controller they name is registered, as EMCO
// requires, and returns the intent names by type.
func (s *Service) digIntents(ctx context.Context, dig catalog.Key) (map[string][]string, error) {
	list, err := catalog.For[catalog.DIGIntentSpec](s.opts.Catalog, catalog.DIGIntents).List(ctx, dig)
	if err != nil {
		return nil, err
	}
	out := map[string][]string{}
	for _, di := range list {
		if err := ValidateIntent(di.Spec); err != nil {
			return nil, fmt.Errorf("intents %q: %w", di.Metadata.Name, err)
		}
		for t, name := range di.Spec.Intent {
			if t != IntentPlacement {
				if err := s.registered(ctx, t); err != nil {
					return nil, err
				}
			}
			out[t] = append(out[t], name)
		}
	}
	return out, nil
}

// registered checks that an action controller has been registered.
func (s *Service) registered(ctx context.Context, name string) error {
	_, err := catalog.For[catalog.ControllerSpec](s.opts.Catalog, catalog.Controllers).Get(ctx, catalog.Key{name})
	if errors.Is(err, errdefs.ErrNotFound) {
		return errdefs.Invalid("the intents name controller %q, which is not registered: register it with POST /v2/controllers", name)
	}
	return err
}
