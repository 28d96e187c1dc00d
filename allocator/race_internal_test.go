//go:build race

package allocator

// The race detector changes what allocates (sync.Pool drops a quarter of
// what is put back): allocation counts allow for it.
func init() { raceEnabled = true }
