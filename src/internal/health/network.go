package health

import "k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

// service: a LoadBalancer Service waits for an ingress address; others are
// ready once they exist.
func service(u *unstructured.Unstructured) Result {
	if stringField(u.Object, "spec", "type") != "LoadBalancer" {
		return ready()
	}
	if hasLoadBalancerIngress(u) {
		return ready()
	}
	return pending("waiting for a load balancer address")
}

// ingress: ready once the controller published a load balancer address.
func ingress(u *unstructured.Unstructured) Result {
	if hasLoadBalancerIngress(u) {
		return ready()
	}
	return pending("waiting for a load balancer address")
}

func hasLoadBalancerIngress(u *unstructured.Unstructured) bool {
	list, _, _ := unstructured.NestedSlice(u.Object, "status", "loadBalancer", "ingress")
	return len(list) > 0
}

// namespace: Active is Ready.
func namespace(u *unstructured.Unstructured) Result {
	if phase := stringField(u.Object, "status", "phase"); phase == "Terminating" {
		return Result{Terminating, "namespace is terminating"}
	}
	return ready()
}

// customResourceDefinition: ready once Established; names in conflict are Failed.
func customResourceDefinition(u *unstructured.Unstructured) Result {
	conds := conditions(u)
	if c, ok := conds["NamesAccepted"]; ok && c.status == "False" {
		return failed("%s", c.describe("names not accepted"))
	}
	if c, ok := conds["Established"]; ok && c.status == "True" {
		return ready()
	}
	return pending("not established yet")
}
