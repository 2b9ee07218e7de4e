// Package gac is Argus's generic action controller (EMCO's GAC): it
// carries out a deployment intent group's generic-k8s-intents on the
// rendered plan before rsync applies it. A GAC resource is either a new
// object (from an uploaded file, or for a ConfigMap or Secret from the
// customization's files) or an object an app already renders; each of its
// customizations selects clusters of the app (by label or name, allow or
// deny, or all of them) and changes the object there with a JSON patch or
// merge patches.
//
// Apply is a pure function over the plan's objects:
//
//	targets := []*gac.Target{{App: "web", Cluster: gac.Cluster{Provider: "cp", Name: "c1", Labels: []string{"edge"}}, Objects: objs}}
//	err := gac.Apply(resources, targets) // targets[0].Objects now holds the added and patched objects
package gac
