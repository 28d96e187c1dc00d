// Package fleetagent makes a cluster without Agones behave like one running
// it, for Quartermaster's local rigs: for every agones.dev/v1 Fleet it keeps
// spec.replicas GameServers, walks each through Scheduled to Ready after a
// start-up delay (with a node from a simulated node pool, an address and
// ports), ends an Allocated server's session after a set length, deletes
// Shutdown servers (the allocator's Release sets Shutdown) and replaces them,
// and writes the Fleet's status counts.
//
// The agent shares the GameServers with allocators that write them too, so
// it never overwrites anyone: every change is an Update carrying the
// resourceVersion the agent read, every delete is preconditioned on it, and
// a server is first set to Shutdown (an Update that loses to a concurrent
// allocation) before it is deleted. A lost race is simply left for the next
// pass, which reads fresh state. Passes are level-triggered: each one lists
// Fleets and GameServers from the API server (a consistent read), so the
// agent needs no memory of what it did to act correctly after a restart.
//
// Time comes through the Clock interface so unit tests step a fake clock
// and call Sync themselves.
package fleetagent
