package forward_test

import (
	"testing"

	"github.com/quartermaster-dev/quartermaster/allocator"
	"github.com/quartermaster-dev/quartermaster/allocator/forward"
	"github.com/quartermaster-dev/quartermaster/soak"
)

// The forwarder names the allocator's key constants again (it may not
// import the allocator package): they must stay the same.
func TestKeyConstantsMatchTheAllocator(t *testing.T) {
	if forward.AllocationKeyAnnotationForTest != allocator.AllocationKeyAnnotation {
		t.Errorf("annotation %q, the allocator's %q", forward.AllocationKeyAnnotationForTest, allocator.AllocationKeyAnnotation)
	}
	if forward.AllocationKeyHeaderForTest != allocator.AllocationKeyHeader {
		t.Errorf("header %q, the allocator's %q", forward.AllocationKeyHeaderForTest, allocator.AllocationKeyHeader)
	}
	if forward.KeyReleasedTextForTest != allocator.ErrKeyReleased.Error() {
		t.Errorf("released text %q, the allocator's ErrKeyReleased %q", forward.KeyReleasedTextForTest, allocator.ErrKeyReleased.Error())
	}
}

// The soak checker derives the forwarded key again (it may not import the
// allocator): it must find the servers the forwarder allocated.
func TestSoakDerivesTheForwardedKey(t *testing.T) {
	for _, c := range [][2]string{{"caller", "load-1"}, {"alice", "match-1"}, {"", "k"}} {
		if got, want := soak.ForwardedKey(c[0], c[1]), forward.DerivedKeyForTest(c[0], c[1]); got != want {
			t.Errorf("identity %q, key %q: the soak checker derives %s, the forwarder %s", c[0], c[1], got, want)
		}
	}
}
