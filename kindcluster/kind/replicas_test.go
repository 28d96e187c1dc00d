package kind

import (
	"slices"
	"testing"
)

func TestAssignReplicas(t *testing.T) {
	for _, tc := range []struct {
		name   string
		labels []string
		want   int
		out    []int
	}{
		{"fresh", []string{"", "", ""}, 3, []int{0, 1, 2}},
		{"kept", []string{"2", "0", "1"}, 3, []int{2, 0, 1}},
		{"one new", []string{"", "2", "0"}, 3, []int{1, 2, 0}},
		{"duplicate", []string{"1", "1", ""}, 3, []int{1, 0, 2}},
		{"out of range and junk", []string{"7", "x", "01"}, 2, []int{0, 1, -1}},
		{"more pods than replicas", []string{"", "", ""}, 2, []int{0, 1, -1}},
		{"fewer pods", []string{"1"}, 2, []int{1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := assignReplicas(tc.labels, tc.want); !slices.Equal(got, tc.out) {
				t.Errorf("assignReplicas(%q, %d) = %v, want %v", tc.labels, tc.want, got, tc.out)
			}
		})
	}
}
