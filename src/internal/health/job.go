package health

import "k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

// job: Complete is Ready; a Failed condition, or more failures than
// spec.backoffLimit (default 6), is Failed; a suspended Job is Ready with a
// reason (it waits by design); otherwise it is still running.
func job(u *unstructured.Unstructured) Result {
	o := u.Object
	conds := conditions(u)
	if c, ok := conds["Complete"]; ok && c.status == "True" {
		return ready()
	}
	if c, ok := conds["Failed"]; ok && c.status == "True" {
		return failed("%s", c.describe("job failed"))
	}
	limit := intOr(o, 6, "spec", "backoffLimit")
	if failures := intOr(o, 0, "status", "failed"); failures > limit {
		return failed("%d failed pods exceed backoffLimit %d", failures, limit)
	}
	if boolField(o, "spec", "suspend") {
		return readyBecause("job is suspended")
	}
	completions := intOr(o, 1, "spec", "completions")
	return pending("%d of %d completions, %d active", intOr(o, 0, "status", "succeeded"), completions, intOr(o, 0, "status", "active"))
}

// cronJob: a CronJob is ready once it exists; a suspended one says so.
func cronJob(u *unstructured.Unstructured) Result {
	if boolField(u.Object, "spec", "suspend") {
		return readyBecause("cron job is suspended")
	}
	return ready()
}
