// Package render turns a Helm chart and its values into the Kubernetes
// objects to apply, with the Helm SDK (never by shelling out).
//
// Values precedence, lowest first: the chart's values.yaml < the profile's
// override values file (named by type.values in the profile's manifest.yaml)
// < dotted-key overrides (a DIG's overrideValues or an instance's
// override-values, with Helm --set semantics). Values are checked against the
// chart's values.schema.json; a violation is an errdefs.ErrInvalid error
// carrying Helm's reason.
//
//	res, err := render.Render(render.Options{Chart: tgz, Profile: profileTgz,
//		ReleaseName: "fw0", Namespace: "default", Overrides: map[string]string{"replicaCount": "2"}})
package render
