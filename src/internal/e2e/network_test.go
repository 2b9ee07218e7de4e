package e2e

import (
	"context"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/argus-mc/argus/src/internal/appcontext"
	"github.com/argus-mc/argus/src/internal/catalog"
	"github.com/argus-mc/argus/src/internal/testenv"
)

// The ncm network CRDs, as the cluster's network plugin would install them.
const networkCRDs = `
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: networks.k8s.plugin.opnfv.org}
spec:
  group: k8s.plugin.opnfv.org
  scope: Namespaced
  names: {plural: networks, singular: network, kind: Network, listKind: NetworkList}
  versions:
  - {name: v1alpha1, served: true, storage: true, schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}}
---
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: providernetworks.k8s.plugin.opnfv.org}
spec:
  group: k8s.plugin.opnfv.org
  scope: Namespaced
  names: {plural: providernetworks, singular: providernetwork, kind: ProviderNetwork, listKind: ProviderNetworkList}
  versions:
  - {name: v1alpha1, served: true, storage: true, schema: {openAPIV3Schema: {type: object, x-kubernetes-preserve-unknown-fields: true}}}
`

func TestClusterNetworkIntents(t *testing.T) {
	sharedClusters(t)
	o := startOrchestrator(t, testenv.UniqueName("net"), "/"+testenv.UniqueName("net"))
	cl := sim.Cluster("cluster1")
	ctx := context.Background()
	crds, err := testenv.DecodeManifests([]byte(networkCRDs))
	if err != nil {
		t.Fatal(err)
	}
	if err := testenv.Apply(ctx, cl.RESTConfig(), false, crds...); err != nil {
		t.Fatal(err)
	}
	if err := testenv.WaitEstablished(ctx, cl.RESTConfig(), "networks.k8s.plugin.opnfv.org", "providernetworks.k8s.plugin.opnfv.org"); err != nil {
		t.Fatal(err)
	}
	o.must(201, "POST", "/v2/cluster-providers", meta("cp"))
	o.uploadOK("/v2/cluster-providers/cp/clusters", meta("cluster1"), cl.Kubeconfig)
	base := "/v2/cluster-providers/cp/clusters/cluster1"
	if code, body := o.call("POST", base+"/apply", nil); code != 400 {
		t.Fatalf("apply with no networks: %d %s", code, body)
	}
	o.must(201, "POST", base+"/networks", obj("ovn-net", map[string]any{"cniType": "ovn4nfv",
		"ipv4Subnets": []any{map[string]any{"name": "subnet1", "subnet": "172.16.33.0/24", "gateway": "172.16.33.1/24"}}}))
	o.must(201, "POST", base+"/provider-networks", obj("prov-net", map[string]any{"cniType": "ovn4nfv", "providerNetType": "VLAN",
		"vlan": map[string]any{"vlanId": "100", "providerInterfaceName": "eth1"}}))
	o.must(202, "POST", base+"/apply", nil)
	st, err := o.catalog.GetState(ctx, catalog.ClusterGroup("cp", "cluster1"))
	if err != nil || st.Current != catalog.StateApplied {
		t.Fatalf("state = %+v %v", st, err)
	}
	o.waitContext(st.ContextID, "networks Applied", allResources(appcontext.RsyncApplied))
	dyn := dynamic.NewForConfigOrDie(cl.RESTConfig())
	nets := dyn.Resource(schema.GroupVersionResource{Group: "k8s.plugin.opnfv.org", Version: "v1alpha1", Resource: "networks"}).Namespace("default")
	n, err := nets.Get(ctx, "ovn-net", metav1.GetOptions{})
	if err != nil || n.GetLabels()["argus.io/app"] != "network-intents" {
		t.Fatalf("network CR: %v %v", n, err)
	}
	if code, body := o.call("POST", base+"/apply", nil); code != 409 {
		t.Fatalf("apply twice: %d %s", code, body)
	}
	o.must(202, "POST", base+"/terminate", nil)
	o.waitContext(st.ContextID, "networks Deleted", allResources(appcontext.RsyncDeleted))
	if _, err := nets.Get(ctx, "ovn-net", metav1.GetOptions{}); err == nil {
		t.Fatal("network CR survived terminate")
	}
	if st, _ := o.catalog.GetState(ctx, catalog.ClusterGroup("cp", "cluster1")); len(st.Actions) != 2 || st.Current != catalog.StateTerminated {
		t.Fatalf("history = %+v", st.Actions)
	}
}
