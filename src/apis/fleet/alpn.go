package fleet

// ALPN is the TLS application protocol of the stream on gRPC (gRPC adds
// "h2" after it): agents offer it after FramedALPN, and agents that
// predate the framing first. An orchestrator that knows it serves the
// connection on gRPC's own HTTP/2 transport, which costs a fraction of
// net/http's per idle stream; anything that does not (an L7 proxy, an
// older orchestrator) picks "h2", and the stream goes through the API
// server's HTTP/2 as before. The version names the framing: gRPC over
// HTTP/2.
const ALPN = "argus-fleet/1"

// FramedALPN is the TLS application protocol of the stream's own framing
// (src/internal/fleet/frame): the same messages, length-prefixed on the
// TLS connection, one stream a connection. Agents offer it before ALPN;
// an orchestrator that does not know it picks ALPN or "h2".
const FramedALPN = "argus-fleet/2"
