package api

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/gorilla/mux"

	"github.com/argus-mc/argus/src/internal/catalog"
	"github.com/argus-mc/argus/src/internal/deploy"
	"github.com/argus-mc/argus/src/internal/history"
	"github.com/argus-mc/argus/src/internal/notify"
	"github.com/argus-mc/argus/src/internal/status"
)

const openAPIPath = "../../../docs/api/openapi.yaml"

// Stubs that make New register every optional route; none is called.
type (
	stubDeployer  struct{ Deployer }
	stubSubs      struct{ Subscriptions }
	stubInstances struct{ Instances }
	stubClouds    struct{ Clouds }
	stubStatus    struct{}
	stubHistory   struct{ History }
	stubOverview  struct{ OverviewReader }
	stubReplicas  struct{ ReplicaSet }
)

func (stubStatus) DIG(context.Context, catalog.Key, url.Values) (any, error) { return nil, nil }
func (stubStatus) Cluster(context.Context, string, string, url.Values) (any, error) {
	return nil, nil
}
func (stubStatus) LogicalCloud(context.Context, catalog.Key, url.Values) (any, error) {
	return nil, nil
}
func (stubStatus) Instance(context.Context, string) (status.InstanceStatus, error) {
	return status.InstanceStatus{}, nil
}
func (stubStatus) Query(context.Context, string, url.Values) (status.InstanceStatus, error) {
	return status.InstanceStatus{}, nil
}
func (stubStatus) RegionQuery(context.Context, url.Values) (status.QueryStatus, error) {
	return status.QueryStatus{}, nil
}

var _ StatusReader = stubStatus{}

// pathVar matches a path variable, gorilla ({name} or {name:regexp}) or
// OpenAPI; variables are compared by position, not name.
var pathVar = regexp.MustCompile(`\{[^}]*\}`)

func operation(method, template string) string {
	return strings.ToUpper(method) + " " + pathVar.ReplaceAllString(template, "{}")
}

// routerOperations lists every (method, path template) the server serves
// with every optional part configured.
func routerOperations(t *testing.T) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cat, _, err := catalog.Open(ctx, catalog.Options{DB: env.Database(t)})
	if err != nil {
		t.Fatal(err)
	}
	s, err := newServer(Options{Catalog: cat, Deploy: stubDeployer{}, Clouds: stubClouds{}, Instances: stubInstances{}, Status: stubStatus{}, Subscriptions: stubSubs{},
		History: stubHistory{}, Overview: stubOverview{}, Console: http.NotFoundHandler(), Replicas: stubReplicas{},
		Tokens: tokenFunc(func(string) bool { return true })})
	if err != nil {
		t.Fatal(err)
	}
	var ops []string
	err = s.router.Walk(func(r *mux.Route, _ *mux.Router, _ []*mux.Route) error {
		tmpl, err := r.GetPathTemplate()
		if err != nil {
			return err
		}
		methods, err := r.GetMethods()
		if err != nil {
			t.Errorf("route %s has no method matcher: every route must name its methods", tmpl)
			return nil
		}
		for _, m := range methods {
			ops = append(ops, operation(m, tmpl))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return ops
}

type tokenFunc func(string) bool

func (f tokenFunc) Valid(token string) bool { return f(token) }

func loadOpenAPI(t *testing.T) *openapi3.T {
	t.Helper()
	doc, err := openapi3.NewLoader().LoadFromFile(openAPIPath)
	if err != nil {
		t.Fatalf("load %s: %v", openAPIPath, err)
	}
	return doc
}

// The document validates as OpenAPI 3.0, examples against their schemas.
func TestOpenAPIDocumentIsValid(t *testing.T) {
	doc := loadOpenAPI(t)
	if err := doc.Validate(context.Background()); err != nil {
		t.Fatalf("%s is not a valid OpenAPI document: %v", openAPIPath, err)
	}
}

// The document describes exactly the routes the server serves.
func TestOpenAPIDocumentMatchesRouter(t *testing.T) {
	doc := loadOpenAPI(t)
	documented := map[string]bool{}
	for path, item := range doc.Paths.Map() {
		for method := range item.Operations() {
			op := operation(method, path)
			if documented[op] {
				t.Errorf("%s is documented twice (paths differing only in variable names)", op)
			}
			documented[op] = true
		}
	}
	served := map[string]bool{}
	for _, op := range routerOperations(t) {
		if served[op] {
			t.Errorf("%s is routed twice", op)
		}
		served[op] = true
	}

	var undocumented, unserved []string
	for op := range served {
		if !documented[op] {
			undocumented = append(undocumented, op)
		}
	}
	for op := range documented {
		if !served[op] {
			unserved = append(unserved, op)
		}
	}
	sort.Strings(undocumented)
	sort.Strings(unserved)
	if len(undocumented) > 0 {
		t.Errorf("routes missing from %s:\n  %s", openAPIPath, strings.Join(undocumented, "\n  "))
	}
	if len(unserved) > 0 {
		t.Errorf("documented in %s but not routed:\n  %s", openAPIPath, strings.Join(unserved, "\n  "))
	}
	if len(served) < 90 {
		t.Errorf("only %d routes found: the stubs no longer register every optional route", len(served))
	}
}

// Security in the document matches the server: the probes are open, every
// other operation inherits the global bearer requirement.
func TestOpenAPISecurityMatchesServer(t *testing.T) {
	doc := loadOpenAPI(t)
	if doc.Components == nil || doc.Components.SecuritySchemes["bearerAuth"] == nil {
		t.Fatal("no bearerAuth security scheme")
	}
	if len(doc.Security) != 1 || doc.Security[0]["bearerAuth"] == nil {
		t.Fatalf("global security = %v, want bearerAuth", doc.Security)
	}
	for path, item := range doc.Paths.Map() {
		for method, op := range item.Operations() {
			open := op.Security != nil && len(*op.Security) == 0
			if open != isOpenPath(path) {
				t.Errorf("%s %s: documented open = %v, served open = %v", method, path, open, isOpenPath(path))
			}
			if !open && op.Responses.Status(http.StatusUnauthorized) == nil {
				t.Errorf("%s %s: needs a token but documents no 401", method, path)
			}
		}
	}
}

// sampleParts are values the schema samples share.
type sampleParts struct {
	yes        bool
	meta       catalog.Metadata
	gvk        catalog.GVK
	req        catalog.InstanceRequest
	cl         status.Cluster
	status     status.Response
	listHeader status.ListHeader
	conn       catalog.ConnectivitySpec
}

func newSampleParts() *sampleParts {
	sp := &sampleParts{yes: true}
	sp.meta = catalog.Metadata{Name: "n1", Description: "d", UserData1: "u1", UserData2: "u2"}
	sp.gvk = catalog.GVK{Group: "apps", Version: "v1", Kind: "Deployment"}
	sp.req = catalog.InstanceRequest{RBName: "rb", RBVersion: "v1", ProfileName: "p", CloudRegion: "r", ReleaseName: "rel",
		Labels: map[string]string{"a": "b"}, OverrideValues: map[string]string{"image.tag": "1"},
		SyncPolicy: &catalog.V1SyncPolicy{SelfHeal: true, Adopt: true}}
	sp.cl = status.Cluster{ClusterProvider: "cp", ClusterProviderEMCO: "cp", Cluster: "c1", Ready: &sp.yes, ReadyStatus: "Available",
		Connectivity: "Available", Monitor: "Running", LastSeen: "2026-01-01T10:00:00Z",
		Resources: []status.Resource{{GVK: status.GVK{Group: "apps", Version: "v1", Kind: "Deployment"}, Name: "web",
			Namespace: "ns", RsyncStatus: "Applied", ClusterStatus: "Present", ReadyStatus: "Ready", Reason: "r",
			DeployedStatus: "Applied", ReadyStatusEMCO: "Ready", RsyncStatusEMCO: "Applied", ClusterStatusEMCO: "Present",
			Detail:     []byte(`{"kind":"Deployment"}`),
			SyncStatus: "OutOfSync", SyncReason: "a field Argus applied was changed on the cluster", AdoptedFrom: "Helm release ns/web",
			Heal: &status.Heal{Count: 2, Last: "2026-01-01T10:00:00Z", By: "self-heal", Was: "OutOfSync", Streak: 2}}}}
	sp.status = status.Response{
		Header:     status.Header{Project: "p", CompositeApp: "ca", Version: "v1", CompositeProfile: "cpf", Name: "dig"},
		EMCOHeader: status.EMCOHeader{CompositeApp: "ca", Version: "v1", CompositeProfile: "cpf", LogicalCloud: "lc"},
		State:      status.State{Actions: []catalog.StateAction{{State: "Instantiated", ContextID: "1", TimeStamp: time.Unix(1e9, 0).UTC()}}},
		States: status.States{StatusContextID: "1", Actions: []status.StateAction{{State: "Instantiated", Instance: "1",
			Time: time.Unix(1e9, 0).UTC(), Revision: 1}}},
		Status: "Instantiated", DeployedStatus: "Instantiated", ReadyStatusEMCO: "Ready",
		DeployedCounts: map[string]int{"Applied": 1}, ReadyCounts: map[string]int{"Ready": 1}, SyncCounts: map[string]int{"OutOfSync": 1},
		RsyncStatus: map[string]int{"Applied": 1}, ClusterStatus: map[string]int{"Present": 1},
		RsyncStatusEMCO: map[string]int{"Applied": 1}, ClusterStatusEMCO: map[string]int{"Present": 1},
		Ready: &sp.yes, ReadyStatus: map[string]int{"Ready": 1},
		Apps:    []status.App{{Name: "a", Ready: &sp.yes, Clusters: []status.Cluster{sp.cl}}},
		Cluster: &sp.cl,
	}
	sp.listHeader = status.ListHeader{Project: "p", CompositeApp: "ca", Version: "v1", CompositeProfile: "cpf", LogicalCloud: "lc", Name: "dig"}
	sp.conn = catalog.ConnectivitySpec{CloudRegion: "r", CloudOwner: "o",
		Other: catalog.ConnectivityRecords{Records: []map[string]string{{"connectivity-record-name": "ovn", "FQDN-or-ip": "10.0.0.1"}}}}
	return sp
}

// catalogueSamples are the objects clients write and read back.
func catalogueSamples(sp *sampleParts) map[string]any {
	return map[string]any{
		"Project":          catalog.Object[catalog.Empty]{Metadata: sp.meta},
		"ClusterProvider":  catalog.Object[catalog.Empty]{Metadata: sp.meta},
		"CompositeApp":     catalog.Object[catalog.CompositeAppSpec]{Metadata: sp.meta, Spec: catalog.CompositeAppSpec{Version: "v1"}},
		"AppProfile":       catalog.Object[catalog.AppProfileSpec]{Metadata: sp.meta, Spec: catalog.AppProfileSpec{App: "a"}},
		"Network":          catalog.Object[catalog.NetworkSpec]{Metadata: sp.meta, Spec: catalog.NetworkSpec{"cniType": "ovn4nfv"}},
		"DeploymentIntent": catalog.Object[catalog.DIGIntentSpec]{Metadata: sp.meta, Spec: catalog.DIGIntentSpec{Intent: map[string]string{"genericPlacementIntent": "g"}}},
		"DeploymentIntentGroup": catalog.Object[catalog.DIGSpec]{Metadata: sp.meta, Spec: catalog.DIGSpec{CompositeProfile: "cp", Version: "r1",
			LogicalCloud: "lc", OverrideValues: []catalog.OverrideValue{{App: "a", Values: map[string]string{"x.y": "z"}}},
			SyncPolicy: &catalog.SyncPolicy{SelfHeal: true, Adopt: true}}},
		"AppIntent": catalog.Object[catalog.AppIntentSpec]{Metadata: sp.meta, Spec: catalog.AppIntentSpec{App: "a", Intent: catalog.PlacementIntent{
			AllOf: []catalog.ClusterSelector{{ClusterProvider: "cp", Cluster: "c1"}},
			AnyOf: []catalog.ClusterSelector{{ClusterProvider: "cp", ClusterLabel: "edge"}}}}},
		"ClusterLabel":                   labelBody{ClusterLabel: "edge"},
		"ConnectivityInfo":               sp.conn,
		"ConnectivityInfoWithKubeconfig": connectivityView{ConnectivitySpec: sp.conn, Kubeconfig: "YXBpVmVyc2lvbjogdjE="},
		"InstanceListItem":               instanceListItem{ID: "123", Request: sp.req, ReleaseName: "rel", Namespace: "ns"},
		"FullInstance": deploy.FullInstance{InstanceSpec: catalog.InstanceSpec{ID: "123", Request: sp.req, Namespace: "ns", ReleaseName: "rel",
			Resources: []catalog.ResourceRef{{GVK: sp.gvk, Name: "web"}}}, Status: "DONE", Hooks: []any{}, PreInstallTimeout: 60},
		"QueryStatus": status.QueryStatus{ResourceCount: 1, ResourcesStatus: []status.ResourceStatus{{Name: "web",
			GVK: status.GVK{Group: "apps", Version: "v1", Kind: "Deployment"}, Status: []byte(`{"kind":"Deployment"}`), ReadyStatus: "Ready"}}},
		"ConfigTemplate":     catalog.ConfigTemplateSpec{TemplateName: "t", Description: "d", ChartName: "c", HasContent: true},
		"ConfigTemplateItem": templateListItem{TemplateName: "t", Description: "d"},
		"Config": deploy.ConfigView{ConfigContent: catalog.ConfigContent{ConfigName: "c1", TemplateName: "t", Description: "d",
			Values: catalog.Values{"a": map[string]any{"b": 1}}}, ConfigVersion: 2, ConfigTag: "first"},
		"ConfigResult": deploy.ConfigResult{InstanceID: "123", RBName: "rb", RBVersion: "v1", ProfileName: "p", ConfigName: "c1",
			TemplateName: "t", ConfigVersion: 2},
		"ConfigTag": catalog.ConfigTag{Version: 1, Tag: "first"},
		"RBDefinition": catalog.RBDefinitionSpec{RBName: "rb", RBVersion: "v1", ChartName: "c", Description: "d",
			Labels: map[string]string{"a": "b"}},
		"RBProfile": catalog.RBProfileSpec{RBName: "rb", RBVersion: "v1", ProfileName: "p", ReleaseName: "rel", Namespace: "ns",
			KubernetesVersion: "1.34", Labels: map[string]string{"a": "b"}, ExtraResourceTypes: []catalog.GVK{sp.gvk}},
		"InstanceRequest": sp.req,
		"Instance": catalog.InstanceSpec{ID: "123", Request: sp.req, Namespace: "ns", ReleaseName: "rel",
			Resources: []catalog.ResourceRef{{GVK: sp.gvk, Name: "web"}}},
	}
}

// answerSamples are what status, subscription, history and overview
// queries answer.
func answerSamples(sp *sampleParts) map[string]any {
	return map[string]any{
		"StatusResponse": sp.status,
		"CloudStatus":    status.CloudResponse{Response: sp.status, Clusters: sp.status.Apps[0].Clusters},
		"AppsList":       status.AppsList{ListHeader: sp.listHeader, Apps: []string{"a"}},
		"ClustersByApp": status.ClustersByApp{ListHeader: sp.listHeader, ClustersByApp: []status.ClustersByAppEntry{{App: "a",
			Clusters: []status.ClusterEntry{{ClusterProvider: "cp", Cluster: "c1"}}}}},
		"ResourcesByApp": status.ResourcesByApp{ListHeader: sp.listHeader, ResourcesByApp: []status.ResourcesByAppEntry{{App: "a",
			ClusterProvider: "cp", Cluster: "c1", Resources: []status.ResourceEntry{{Name: "web", GVK: status.GVK{Group: "apps", Version: "v1", Kind: "Deployment"}}}}}},
		"Controller": catalog.Object[catalog.ControllerSpec]{Metadata: sp.meta, Spec: catalog.ControllerSpec{Host: "h", Port: 9000, Type: "action", Priority: 1}},
		"LogicalCloud": catalog.Object[catalog.LogicalCloudSpec]{Metadata: sp.meta, Spec: catalog.LogicalCloudSpec{Namespace: "ns", Level: "1",
			Labels: catalog.StringMap{"a.b/c": "d"}, User: catalog.LogicalCloudUser{UserName: "u", Type: "certificate"}}},
		"ClusterReference": catalog.Object[catalog.ClusterReferenceSpec]{Metadata: sp.meta, Spec: catalog.ClusterReferenceSpec{ClusterProvider: "cp",
			Cluster: "c1", LoadBalancerIP: "0.0.0.0", Certificate: "Y2VydA==", CertificateError: "e"}},
		"UserPermission": catalog.Object[catalog.UserPermissionSpec]{Metadata: sp.meta, Spec: catalog.UserPermissionSpec{Namespace: "ns",
			APIGroups: []string{""}, Resources: []string{"pods"}, Verbs: []string{"get"}}},
		"ClusterQuota":     catalog.Object[catalog.ClusterQuotaSpec]{Metadata: sp.meta, Spec: catalog.StringMap{"limits.cpu": "2"}},
		"GenericK8sIntent": catalog.Object[catalog.Empty]{Metadata: sp.meta},
		"GenericResource": catalog.Object[catalog.GACResourceSpec]{Metadata: sp.meta, Spec: catalog.GACResourceSpec{App: "a", NewObject: "true",
			ResourceGVK: catalog.ResourceGVK{APIVersion: "v1", Kind: "ConfigMap", Name: "cm"}}},
		"Customization": catalog.Object[catalog.CustomizationSpec]{Metadata: sp.meta, Spec: catalog.CustomizationSpec{ClusterSpecific: "true",
			ClusterInfo: catalog.ClusterInfo{Scope: "label", ClusterProvider: "cp", Cluster: "c1", ClusterLabel: "edge", Mode: "allow"},
			PatchType:   "json", PatchJSON: catalog.JSONValue(`[{"op":"add","path":"/a","value":1}]`),
			ConfigMapOptions: catalog.DataKeyOptions{DataKeyOptions: []catalog.KeyOption{{FileName: "f", KeyName: "k", MergePatch: "false"}}},
			SecretOptions:    catalog.DataKeyOptions{DataKeyOptions: []catalog.KeyOption{{FileName: "f", KeyName: "k"}}}}},
		"InstanceSubscription": notify.View{Subscription: notify.Subscription{Name: "s1", SubscriptionSpec: catalog.SubscriptionSpec{
			MinNotifyInterval: 5, CallbackURL: "http://so.example/cb", Metadata: map[string]any{"k": "v"}}},
			LastUpdateTime: time.Unix(1e9, 0).UTC(), LastNotifyTime: time.Unix(1e9+1, 0).UTC(), LastNotifyStatus: 204,
			Delivery: notify.DeliveryView{Pending: true, Sequence: 3, Attempts: 2, LastError: "callback answered 500"}},
		"DIGSubscription": notify.View{Subscription: notify.Subscription{Name: "s1", SubscriptionSpec: catalog.SubscriptionSpec{
			CallbackURL: "http://so.example/cb", Type: "cluster", Output: "all", App: []string{"a"}, Cluster: []string{"cp+c1"},
			Resource: []string{"Deployment/web"}}}},
		"History": historyAnswer{History: []history.Entry{{Seq: 2, Time: time.Unix(1e9, 0).UTC(), Kind: history.KindResource, Instance: "1",
			App: "a", ClusterProvider: "cp", Cluster: "c1", Resource: &history.Resource{GVK: status.GVK{Version: "v1", Kind: "ConfigMap"}, Name: "cm", Namespace: "ns"},
			From: &history.State{RsyncStatus: "Applied", ClusterStatus: "Present", Ready: &sp.yes, ReadyStatus: "Ready", SyncStatus: "Synced"},
			To:   &history.State{RsyncStatus: "Applied", ClusterStatus: "NotPresent", Ready: new(bool), ReadyStatus: "NotPresent", SyncStatus: "Missing"}, Reason: "r"},
			{Seq: 3, Time: time.Unix(1e9, 0).UTC(), Kind: history.KindHeal, Instance: "1", App: "a", ClusterProvider: "cp", Cluster: "c1",
				Resource: &history.Resource{GVK: status.GVK{Version: "v1", Kind: "ConfigMap"}, Name: "cm"}, Reason: "re-applied by sync: it was Missing",
				By: "sync", Heals: 1},
			{Seq: 4, Time: time.Unix(1e9, 0).UTC(), Kind: history.KindAdopt, Instance: "1", App: "a", ClusterProvider: "cp", Cluster: "c1",
				Resource: &history.Resource{GVK: status.GVK{Version: "v1", Kind: "ConfigMap"}, Name: "cm"}, AdoptedFrom: "Helm release ns/web"},
			{Seq: 1, Time: time.Unix(1e9, 0).UTC(), Kind: history.KindAction, From: &history.State{State: "Approved"}, To: &history.State{State: "Instantiated", Status: "Instantiating"}}}},
		"Overview": status.Overview{DeploymentIntentGroups: []status.Summary{{Kind: "dig", Project: "p", CompositeApp: "ca", Version: "v1", Name: "dig",
			StatusURL: "/v2/…/status", State: "Instantiated", Status: "Instantiated", Instance: "1", Ready: false, ReadyStatus: "Pending",
			ReadyCounts: map[string]int{"Ready": 1, "NotPresent": 1}, Total: 2, ReadyCount: 1,
			Apps: []status.AppSummary{{Name: "a", Clusters: []status.ClusterSummary{{ClusterProvider: "cp", Cluster: "c1", ReadyStatus: "Pending",
				Total: 2, ReadyCount: 1, Connectivity: "Available", Monitor: "Running", Drifted: 1}}}},
			NotReady: []status.NotReady{{App: "a", ClusterProvider: "cp", Cluster: "c1", GVK: status.GVK{Version: "v1", Kind: "ConfigMap"}, Name: "cm",
				ClusterStatus: "NotPresent", ReadyStatus: "NotPresent", Reason: "r"}}, NotReadyCount: 1, SyncCounts: map[string]int{"Missing": 1}}},
			Instances: []status.Summary{{Kind: "instance", ID: "123", Name: "rel", RBName: "rb", RBVersion: "v1", ProfileName: "p", CloudRegion: "r",
				StatusURL: "/v1/instance/123/status", ReadyCounts: map[string]int{}, Apps: []status.AppSummary{}, NotReady: []status.NotReady{},
				SyncCounts: map[string]int{}}}},
		"ClusterOverview": status.ClusterOverview{Replica: "r1", Clusters: []status.ClusterState{{ClusterProvider: "cp", Cluster: "c1",
			Connectivity: "Available", Monitor: "Running", LastSeen: "2026-01-01T10:00:00Z", Reason: "r", Contexts: 2, WatcherOwner: "r1"}}},
		"InstanceList": status.Instances{Name: "dig", Project: "p", CompositeApp: "ca", Version: "v1", Instances: []string{"1", "2"}},
		"InstanceStatus": status.InstanceStatus{Request: sp.req, Ready: true, ResourceCount: 1, ResourcesStatus: []status.ResourceStatus{{
			Name: "web", GVK: status.GVK{Group: "apps", Version: "v1", Kind: "Deployment"}, Status: []byte(`{"replicas":1}`),
			ReadyStatus: "Ready", Reason: "r", SyncStatus: "Synced"}}, SyncCounts: map[string]int{"Synced": 1}},
		"SyncResult": syncResultSample(),
	}
}

// The schemas describe what the handlers really send: a fully populated
// value of each Go type, marshalled, must validate against its schema and
// use no property the schema does not declare (so a renamed JSON field
// fails here rather than in a client).
func TestOpenAPISchemasMatchGoTypes(t *testing.T) {
	doc := loadOpenAPI(t)
	sp := newSampleParts()
	samples := catalogueSamples(sp)
	maps.Copy(samples, answerSamples(sp))
	for name, v := range samples {
		t.Run(name, func(t *testing.T) {
			ref := doc.Components.Schemas[name]
			if ref == nil || ref.Value == nil {
				t.Fatalf("no schema %s", name)
			}
			data, err := json.Marshal(v)
			if err != nil {
				t.Fatal(err)
			}
			var generic any
			if err := json.Unmarshal(data, &generic); err != nil {
				t.Fatal(err)
			}
			if err := ref.Value.VisitJSON(generic); err != nil {
				t.Errorf("%s does not validate against its schema: %v", data, err)
			}
			if extra := undeclared(ref.Value, generic, ""); len(extra) > 0 {
				t.Errorf("properties the schema does not declare: %v in %s", extra, data)
			}
		})
	}
}

// undeclared lists the object keys in v that schema neither declares nor
// admits through additionalProperties.
func undeclared(schema *openapi3.Schema, v any, at string) []string {
	var out []string
	switch v := v.(type) {
	case map[string]any:
		props := map[string]*openapi3.Schema{}
		var additional *openapi3.Schema
		open := false
		collect(schema, props, &additional, &open)
		for k, child := range v {
			switch {
			case props[k] != nil:
				out = append(out, undeclared(props[k], child, at+"/"+k)...)
			case additional != nil:
				out = append(out, undeclared(additional, child, at+"/"+k)...)
			case !open:
				out = append(out, at+"/"+k)
			}
		}
	case []any:
		if schema.Items != nil && schema.Items.Value != nil {
			for i, child := range v {
				out = append(out, undeclared(schema.Items.Value, child, fmt.Sprintf("%s/%d", at, i))...)
			}
		}
	}
	return out
}

// collect gathers properties through allOf; open is set by
// additionalProperties: true, additional by an additionalProperties schema.
func collect(s *openapi3.Schema, props map[string]*openapi3.Schema, additional **openapi3.Schema, open *bool) {
	for k, p := range s.Properties {
		props[k] = p.Value
	}
	if s.AdditionalProperties.Has != nil && *s.AdditionalProperties.Has {
		*open = true
	}
	if s.AdditionalProperties.Schema != nil {
		*additional = s.AdditionalProperties.Schema.Value
	}
	for _, sub := range s.AllOf {
		collect(sub.Value, props, additional, open)
	}
}

func syncResultSample() deploy.SyncResult {
	t := deploy.SyncTarget{App: "a", ClusterProvider: "cp", Cluster: "c1", Name: "cm", Namespace: "ns", SyncStatus: "Missing",
		SyncReason: "applied, but not found on the cluster"}
	t.GVK.Version, t.GVK.Kind = "v1", "ConfigMap"
	return deploy.SyncResult{Instance: "1", Resources: []deploy.SyncTarget{t}}
}
