package health

import "strings"

// Workload carries the state of a workload's pods up to the workload. A
// workload's own rule sees only its replica counts, so a Deployment whose
// pod crash-loops reads "1 of 2 replicas ready" — Pending, as if it were
// still starting. When the workload is Pending and one of its pods has
// Failed (CrashLoopBackOff, ImagePullBackOff, a failed phase), the
// workload is Failed, with the worst pod's reason after its own:
// "1 of 2 replicas ready; pod web-7d9c-x2v: CrashLoopBackOff". A workload
// that is Ready, Failed, Terminating or Unknown keeps its own result (a
// Ready one has the replicas it asked for, whatever an old pod does), and
// so does a Pending one whose pods are merely starting.
func Workload(own Result, pods []Item) Result {
	if own.Status != Pending {
		return own
	}
	var worst *Item
	for i := range pods {
		if pods[i].Result.Status == Failed && (worst == nil || pods[i].Name < worst.Name) {
			worst = &pods[i] // the first by name, so the reason is stable
		}
	}
	if worst == nil {
		return own
	}
	why := worst.Result.Reason
	if why == "" {
		why = string(Failed)
	}
	parts := []string{}
	if own.Reason != "" {
		parts = append(parts, own.Reason)
	}
	parts = append(parts, strings.ToLower(worst.Kind)+" "+worst.Name+": "+why)
	return Result{Status: Failed, Reason: strings.Join(parts, "; ")}
}
