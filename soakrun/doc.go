// Package soakrun runs a soak: it brings up a multi-cluster rig (or
// points at an allocator already running elsewhere), drives open-loop
// load through qm load's engine with sessions held and released, injects
// the faults of a seeded schedule, writes every request, release and
// fault to a history as it goes, reads every GameServer object once the
// run has settled, and holds the two against the allocator's promises
// with the soak package's checker.
//
// soak is the pure part (formats, schedule, checker); this package is
// the part that talks to clusters, processes and the clock.
package soakrun
