package forward

import "context"

// Placements remember, per forwarded key (a derivedKey of the caller's
// key), the one cluster a keyed request was last sent to. Every send of a
// caller-keyed request to a cluster, local or remote, is recorded first,
// and the record moves to another cluster only when the one it names has
// answered that it holds nothing for the key. So at any moment at most one
// cluster may hold the key's allocation, and a retry of the request,
// through any replica of this allocator, asks that cluster first; when it
// cannot be reached, the retry is answered Unavailable instead of being
// served elsewhere (which would leave the first allocation held for
// nobody).
//
// A record has a version, and Place changes it only from the version its
// caller last saw: two tries of one key at once (a caller's retry while
// its first try still runs) cannot both move the record, and the one that
// loses learns where the other went.
type Placements interface {
	// Place records that key's request is being sent to cluster ("":
	// none may hold it), if the record is still at version ("" when the
	// caller has seen no record: it must not exist). Otherwise ok is
	// false and cur and curVersion are the record as it is now (cur ""
	// when it names no cluster). Each successful Place gives a new
	// version, even to the same cluster.
	Place(ctx context.Context, key, cluster, version string) (cur, curVersion string, ok bool, err error)
}
