package forward_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/quartermaster-dev/quartermaster/allocator/forward"
	"github.com/quartermaster-dev/quartermaster/allocator/pb/allocation"
	"github.com/quartermaster-dev/quartermaster/core"
)

// explainingSource is a Source that may be not ready and may know why a
// Secret is missing, as the kubernetes source does.
type explainingSource struct {
	*forward.Set
	notReady  error
	secretErr error
}

func (s explainingSource) Ready() error { return s.notReady }

func (s explainingSource) SecretError(string, string) error { return s.secretErr }

func TestSourceNotReadyAndSecretReasons(t *testing.T) {
	set := forward.NewSet(map[string][]core.Policy{"default": {{
		Name: "far", Priority: 1, Weight: 1,
		Connection: core.ConnectionInfo{ClusterName: "far", Endpoints: []string{"far.example:443"}, SecretName: "to-far"},
	}}}, nil)
	req := &allocation.AllocationRequest{Namespace: "default", MultiClusterSetting: &allocation.MultiClusterSetting{Enabled: true}}
	local := func(context.Context, *allocation.AllocationRequest) (*allocation.AllocationResponse, error) {
		t.Fatal("no local entry here")
		return nil, nil
	}
	for _, tc := range []struct {
		name string
		src  explainingSource
		code codes.Code
		want []string
	}{
		{"not ready", explainingSource{Set: set, notReady: errors.New("still listing")},
			codes.Unavailable, []string{"not available yet", "still listing"}},
		{"secret forbidden", explainingSource{Set: set, secretErr: errors.New("reading Secret default/to-far is forbidden")},
			codes.FailedPrecondition, []string{`cluster "far"`, "default/to-far", "forbidden"}},
		{"secret simply missing", explainingSource{Set: set},
			codes.FailedPrecondition, []string{"default/to-far", "not found"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f, err := forward.New(forward.Options{Source: tc.src, Self: "here"})
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			_, err = f.Allocate(context.Background(), req, 1, local)
			st := status.Convert(err)
			if st.Code() != tc.code {
				t.Fatalf("code %v (%s), want %v", st.Code(), st.Message(), tc.code)
			}
			for _, w := range tc.want {
				if !strings.Contains(st.Message(), w) {
					t.Errorf("message %q lacks %q", st.Message(), w)
				}
			}
		})
	}
}
