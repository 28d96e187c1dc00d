package forward

// The names this package gives the allocator's key constants, for the
// external tests that hold them equal.
const (
	AllocationKeyAnnotationForTest = allocationKeyAnnotation
	AllocationKeyHeaderForTest     = allocationKeyHeader
	KeyReleasedTextForTest         = keyReleasedText
)
