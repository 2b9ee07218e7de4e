// Package loopback tells a loopback address from its text alone: a name
// other than "localhost" is never resolved, so no lookup can be steered
// (the orchestrator's debug listener, the fleet agent's plain-http
// refusal).
package loopback
