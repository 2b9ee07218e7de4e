// Package fleet is the generated Go code of fleet.proto: the protocol
// between a pull cluster's agent and the orchestrator's hub (one
// long-lived bidirectional stream: work down by revision and content
// hash, status deltas up). The agent is src/internal/fleet/agent, the hub
// src/internal/fleet/hub; docs/fleet.md describes the protocol.
package fleet
