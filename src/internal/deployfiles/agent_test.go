package deployfiles

import (
	"slices"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
)

// The agent's manifests are the monitor's with the Deployment in agent
// mode: the orchestrator's URL and the join token from the join Secret,
// and RBAC that applies work without ever escalating, binding or
// impersonating, and reads or writes no Secret but its credential's.
func TestAgentManifests(t *testing.T) {
	img := loadImage(t)
	objs := kustomize(t, "agent")
	for _, o := range objs {
		// The monitor's heartbeat Lease is in kube-system.
		if ns := o.GetNamespace(); ns != "" && ns != namespace && ns != "kube-system" {
			t.Errorf("%s %s is in namespace %q, want %s", o.GetKind(), o.GetName(), ns, namespace)
		}
	}
	find(t, objs, "CustomResourceDefinition", "resourcebundlestates.k8splugin.io")
	d := typed[appsv1.Deployment](t, find(t, objs, "Deployment", "argus-monitor"))
	pod := d.Spec.Template.Spec
	checkHardened(t, img, "agent", pod)
	env := map[string]corev1.EnvVar{}
	for _, e := range pod.Containers[0].Env {
		env[e.Name] = e
	}
	for name, key := range map[string]string{"ARGUS_ORCHESTRATOR": "orchestrator", "ARGUS_JOIN_TOKEN": "joinToken"} {
		ref := env[name].ValueFrom
		if ref == nil || ref.SecretKeyRef == nil || ref.SecretKeyRef.Name != "argus-agent-join" || ref.SecretKeyRef.Key != key {
			t.Errorf("env %s = %+v, want secret argus-agent-join key %s", name, env[name], key)
		}
	}
	if ref := env["POD_NAMESPACE"].ValueFrom; ref == nil || ref.FieldRef == nil || ref.FieldRef.FieldPath != "metadata.namespace" {
		t.Errorf("env POD_NAMESPACE = %+v, want the pod's namespace (where the credential Secret goes)", env["POD_NAMESPACE"])
	}

	sa := pod.ServiceAccountName
	bound := map[string]bool{}
	for _, o := range objs {
		var subjects []rbacv1.Subject
		var role rbacv1.RoleRef
		switch o.GetKind() {
		case "ClusterRoleBinding":
			b := typed[rbacv1.ClusterRoleBinding](t, o)
			subjects, role = b.Subjects, b.RoleRef
		case "RoleBinding":
			b := typed[rbacv1.RoleBinding](t, o)
			subjects, role = b.Subjects, b.RoleRef
		default:
			continue
		}
		if slices.ContainsFunc(subjects, func(s rbacv1.Subject) bool { return s.Kind == "ServiceAccount" && s.Name == sa }) {
			bound[role.Kind+"/"+role.Name] = true
		}
	}
	for _, want := range []string{"ClusterRole/argus-monitor", "ClusterRole/argus-agent", "Role/argus-agent-credential"} {
		if !bound[want] {
			t.Errorf("%s is not bound to the agent's service account %s (bound: %v)", want, sa, bound)
		}
	}
	for _, o := range objs {
		var rules []rbacv1.PolicyRule
		switch o.GetKind() {
		case "ClusterRole":
			rules = typed[rbacv1.ClusterRole](t, o).Rules
		case "Role":
			rules = typed[rbacv1.Role](t, o).Rules
		default:
			continue
		}
		for _, r := range rules {
			for _, v := range r.Verbs {
				if v == "*" || v == "escalate" || v == "bind" || v == "impersonate" {
					t.Errorf("%s %s grants %q", o.GetKind(), o.GetName(), v)
				}
			}
		}
	}
	cred := typed[rbacv1.Role](t, find(t, objs, "Role", "argus-agent-credential"))
	for _, r := range cred.Rules {
		if !slices.Equal(r.Verbs, []string{"create"}) && !slices.Equal(r.ResourceNames, []string{"argus-agent"}) {
			t.Errorf("credential rule %+v reaches Secrets other than argus-agent", r)
		}
	}
}
