package forward

import "testing"

// The names this package gives the allocator's key constants, for the
// external tests that hold them equal.
const (
	AllocationKeyAnnotationForTest = allocationKeyAnnotation
	AllocationKeyHeaderForTest     = allocationKeyHeader
	KeyReleasedTextForTest         = keyReleasedText
)

// DerivedKeyForTest is derivedKey, for the external test that holds the
// soak checker's copy of it equal.
func DerivedKeyForTest(identity, key string) string { return derivedKey(identity, key) }

// NewLossyLinkForTest is a relay in front of upstream that loses answers
// when told to, as the rig's FaultAnswerLost does (lostanswer_test.go).
func NewLossyLinkForTest(t *testing.T, upstream string) *lossyLink { return newLossyLink(t, upstream) }
