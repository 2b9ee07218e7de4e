package catalog

// Status subscriptions (SPEC section 8) live under what they watch and are
// deleted with it.
var (
	InstanceSubscriptions = &Kind{Name: "subscription", Collection: "instancesubscriptions", Parent: Instances, Cascade: true}
	DIGSubscriptions      = &Kind{Name: "status subscription", Collection: "digsubscriptions", Parent: DeploymentIntentGroups, Cascade: true}
)

// SubscriptionKinds lists the subscription kinds.
func SubscriptionKinds() []*Kind { return []*Kind{InstanceSubscriptions, DIGSubscriptions} }

// SubscriptionSpec is a stored subscription as clients write it (SPEC
// section 8). The secret is kept because every delivery is signed with it;
// the API never returns it.
type SubscriptionSpec struct {
	MinNotifyInterval int64  `json:"min-notify-interval" bson:"minNotifyInterval"`
	CallbackURL       string `json:"callback-url" bson:"callbackUrl"`
	Metadata          Values `json:"metadata,omitempty" bson:"metadata,omitempty"`
	Secret            string `json:"secret,omitempty" bson:"secret,omitempty"`
	// The status query filters, DIG subscriptions only.
	Type     string   `json:"type,omitempty" bson:"type,omitempty"`
	Output   string   `json:"output,omitempty" bson:"output,omitempty"`
	App      []string `json:"app,omitempty" bson:"app,omitempty"`
	Cluster  []string `json:"cluster,omitempty" bson:"cluster,omitempty"`
	Resource []string `json:"resource,omitempty" bson:"resource,omitempty"`
}
