// Package statusnotify is the generated Go code of statusnotify.proto:
// EMCO's status notification service (StatusRegister, StatusDeregister)
// and its messages, wire-compatible with emcoctl watch. Argus serves it
// from src/internal/statusnotify.
package statusnotify
