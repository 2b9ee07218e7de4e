// Package frame is the fleet stream's own framing on a TLS connection
// that negotiated pb.FramedALPN: the agent's and the hub's protobuf
// messages, length-prefixed, with no HTTP/2 under them.
//
// gRPC's transport holds three goroutines a connection (its reader, its
// writer and its keepalive timer) besides the stream's handler, and an
// HTTP/2 connection's state (flow control, HPACK tables, frame buffers):
// at fleet size, most of what an idle agent costs the hub. A framed
// connection carries exactly one stream, so it needs none of that: the
// hub's handler reads the frames itself, the session's sender writes
// while something is queued, and a read deadline (the agents heartbeat)
// takes the place of keepalive pings.
//
// A frame is a one-byte kind, a four-byte big-endian length and that many
// bytes:
//
//	open     agent → hub, first: the agent's credential (at most 4 KiB)
//	message  either way: a pb.AgentMessage or a pb.HubMessage
//	status   hub → agent, last: the stream's end as a google.rpc.Status
//
// Errors keep gRPC's codes (a status frame is one), so an agent treats a
// framed stream's end as it treats a gRPC one's.
package frame
