// Package loadgen drives load at a live allocator, Quartermaster's or
// Agones' own, through the Agones allocation API (gRPC or REST, mTLS), and
// measures it honestly: open-loop arrivals from a pure pacer, latency
// counted from each request's intended send time into HDR histograms (so a
// server that stalls cannot hide its queue), a bound on requests in flight
// with the ones that could not be sent counted, and several targets taking
// turns in short windows so they are compared as ratios on the same
// machine. Results are a versioned JSON document (Result) that merges
// exactly across generators; `qm load` is its command.
package loadgen
