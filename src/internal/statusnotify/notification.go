package statusnotify

import (
	pb "github.com/argus-mc/argus/src/apis/statusnotify"
	"github.com/argus-mc/argus/src/internal/appcontext"
	"github.com/argus-mc/argus/src/internal/status"
)

// notification turns a status answer into what EMCO's servers send: the
// subject is DEPLOYED while its context is Instantiated or Updated, READY
// when, besides, the clusters report it Ready (a logical cloud: when
// deployed, as EMCO's dcm has it); with all, per app (a DIG) or per
// cluster (a cluster, a logical cloud) the same for every cluster and
// resource. It is pure.
func notification(r status.Response, ready, all bool, subj subject) *pb.StatusNotification {
	deployed := r.DeployedStatus == appcontext.Instantiated || r.DeployedStatus == appcontext.Updated
	n := &pb.StatusNotification{StatusValue: value(ready, deployed && (subj.readyWhenDeployed || r.ReadyStatusEMCO == status.EMCOReady), deployed)}
	if !all {
		return n
	}
	for _, app := range r.Apps {
		as := &pb.AppStatus{App: app.Name}
		appOK := true
		for _, c := range app.Clusters {
			cs := &pb.ClusterStatus{ClusterProvider: c.ClusterProvider, Cluster: c.Cluster}
			clusterOK := true
			for _, res := range c.Resources {
				ok := res.DeployedStatus == appcontext.RsyncApplied
				if ready {
					ok = res.ReadyStatusEMCO == status.EMCOReady
				}
				clusterOK = clusterOK && ok
				cs.Resources = append(cs.Resources, &pb.ResourceStatus{Name: res.Name,
					Gvk:         &pb.GVK{Group: res.GVK.Group, Version: res.GVK.Version, Kind: res.GVK.Kind},
					StatusValue: value(ready, ok, ok)})
			}
			cs.StatusValue = value(ready, clusterOK, clusterOK)
			appOK = appOK && clusterOK
			if subj.clusters {
				n.Details = append(n.Details, &pb.StatusDetail{StatusDetail: &pb.StatusDetail_Cluster{Cluster: cs}})
			} else {
				as.Clusters = append(as.Clusters, cs)
			}
		}
		if !subj.clusters {
			as.StatusValue = value(ready, appOK, appOK)
			n.Details = append(n.Details, &pb.StatusDetail{StatusDetail: &pb.StatusDetail_App{App: as}})
		}
	}
	return n
}

// value is READY/NOT_READY for a ready registration, else
// DEPLOYED/NOT_DEPLOYED.
func value(ready, isReady, isDeployed bool) pb.StatusValue {
	switch {
	case ready && isReady:
		return pb.StatusValue_READY
	case ready:
		return pb.StatusValue_NOT_READY
	case isDeployed:
		return pb.StatusValue_DEPLOYED
	}
	return pb.StatusValue_NOT_DEPLOYED
}
