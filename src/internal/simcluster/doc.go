// Package simcluster runs simulated Kubernetes clusters made of real
// components: per cluster a kube-apiserver, kube-controller-manager,
// kube-scheduler (built from k8s.io/kubernetes v1.34.4 by `make sim`) and kwok
// v0.8.0 for fake Nodes and pod status, all sharing one embedded etcd under
// distinct --etcd-prefix values. Deployments, Jobs, StatefulSets, CRDs with
// status subresources, watches and server-side apply all behave as on a real
// cluster; only containers do not run.
//
// Pod state is driven through the sim.argus.io/state annotation (not-ready,
// crashloop, failed, succeeded, ready) or, for a pod annotated sim.argus.io/manual=true,
// by patching its status directly; see stages/pod.yaml.
//
//	set, err := simcluster.Start(ctx, simcluster.Options{Clusters: 2, Dir: dir})
//	defer set.Stop()
//	cs, _ := kubernetes.NewForConfig(set.Clusters[0].RESTConfig())
//	set.Clusters[1].StopAPIServer() // fault injection; StartAPIServer(ctx) brings it back
package simcluster
