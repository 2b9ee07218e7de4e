package syncstate

// Rsync statuses Decide reads (appcontext's vocabulary; repeated here so
// the package stays free of the orchestrator's).
const (
	rsyncApplied = "Applied"
	rsyncDeleted = "Deleted"
)

// Input is what one resource's sync state is decided from.
type Input struct {
	// RsyncStatus is rsync's status of the resource (Applied, Failed …),
	// RsyncReason why it is not Applied.
	RsyncStatus, RsyncReason string
	// AppliedHash is Hash of the object the last apply returned; "" when
	// none was recorded (applied by an Argus that did not record it).
	AppliedHash string
	// Believable is false while the cluster's word cannot be taken
	// (unreachable, monitor silent or missing, no bundle yet); Why says so.
	Believable bool
	Why        string
	// Unwatched is the monitor's reason for not watching the kind, if any.
	Unwatched string
	// Reports says the bundle carries hashes (a monitor that computes them).
	Reports bool
	// Found says the bundle lists the object; LiveHash is its hash there.
	Found    bool
	LiveHash string
}

// Decide returns a resource's sync state and why it is not Synced. A
// resource rsync deleted (an update removed it) has none: "".
func Decide(in Input) (state, reason string) {
	switch {
	case in.RsyncStatus == rsyncDeleted:
		return "", ""
	case in.RsyncStatus != rsyncApplied && in.RsyncReason != "":
		return OutOfSync, "not applied (rsync: " + in.RsyncStatus + "): " + in.RsyncReason
	case in.RsyncStatus != rsyncApplied:
		return OutOfSync, "not applied (rsync: " + in.RsyncStatus + ")"
	case !in.Believable:
		return Unknown, in.Why
	case !in.Found && in.Unwatched != "":
		return Unknown, in.Unwatched
	case !in.Found:
		return Missing, "applied, but not found on the cluster"
	case in.AppliedHash == "":
		return Unknown, "applied before Argus recorded the fields it manages; a sync records them"
	case !in.Reports:
		return Unknown, "the cluster's monitor does not report the fields Argus manages (an older monitor)"
	case in.LiveHash == "":
		return OutOfSync, "Argus manages none of its fields any more (replaced or recreated outside Argus)"
	case in.LiveHash != in.AppliedHash:
		return OutOfSync, "a field Argus applied was changed on the cluster"
	}
	return Synced, ""
}

// Drifted reports a state that sync and self-heal re-apply: OutOfSync or
// Missing while rsync considers the resource Applied.
func Drifted(rsyncStatus, state string) bool {
	return rsyncStatus == rsyncApplied && (state == OutOfSync || state == Missing)
}
