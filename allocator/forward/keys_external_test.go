package forward_test

import (
	"testing"

	"github.com/quartermaster-dev/quartermaster/allocator"
	"github.com/quartermaster-dev/quartermaster/allocator/forward"
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
