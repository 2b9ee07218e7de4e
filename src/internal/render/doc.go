// Package render turns a Helm chart and its values into the Kubernetes
// objects to apply, with the Helm SDK (never by shelling out).
//
// Charts are accepted in the layouts Helm and EMCO users pack them in (see
// LoadChart); every archive goes through package archive's limits first.
//
// Values precedence, lowest first: the chart's values.yaml < the profile's
// override values file (named by type.values in the profile's manifest.yaml)
// < dotted-key overrides (a DIG's overrideValues or an instance's
// override-values), applied as Helm applies `--set key=value`, in key order.
// Values are checked against the chart's values.schema.json; a violation is
// an errdefs.ErrInvalid error carrying Helm's reason.
//
// Rendering runs untrusted templates, so the orchestrator runs it in a Pool
// of warm child processes of its own binary (WorkerArg, WorkerMain): each
// render is bounded in time (the worker is killed), memory (a heap watchdog
// and, outside race-detector builds, RLIMIT_AS) and output; a render over a
// limit fails with an error that is both ErrLimit and errdefs.ErrInvalid.
// InProcess renders in the caller's process, for tests and tools.
//
//	pool := render.NewPool(render.PoolOptions{Workers: 2, Timeout: 20 * time.Second})
//	defer pool.Close()
//	res, err := pool.Render(ctx, render.Options{Chart: tgz, Profile: profileTgz,
//		ReleaseName: "fw0", Namespace: "default", Overrides: map[string]string{"replicaCount": "2"}})
package render
