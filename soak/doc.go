// Package soak holds what a soak run records and how it is judged: the
// history of every request, release and fault (JSON lines, written as the
// run goes), the snapshot of every GameServer object read from every API
// server afterwards, the checker that holds the two against the
// allocator's promises, and the seeded fault schedule a run follows.
//
// The package is pure: it reads and writes files and values, never a
// network, a cluster or the clock. Driving a rig and injecting faults
// belong to the command that uses it.
package soak
