package forward

import (
	"bytes"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/quartermaster-dev/quartermaster/allocator/pb/allocation"
)

// The key suffix is what the generated encoder writes for a request
// holding only the key, and a forwarded request followed by it reads as
// that request with its key replaced (the caller's annotations and the
// forwarded-for one kept), in metadata and metaPatch alike.
func TestKeySuffix(t *testing.T) {
	for _, key := range []string{"qmf-0123456789abcdef-1", "qmk-" + strings.Repeat("f", 32), strings.Repeat("k", 128)} {
		ann := map[string]string{allocationKeyAnnotation: key}
		want, err := (&allocation.AllocationRequest{
			Metadata:  &allocation.MetaPatch{Annotations: ann},
			MetaPatch: &allocation.MetaPatch{Annotations: ann}, //nolint:staticcheck // SA1019: the double write.
		}).MarshalVT()
		if err != nil {
			t.Fatal(err)
		}
		if got := appendKeySuffix(nil, key); !bytes.Equal(got, want) {
			t.Fatalf("key %q: suffix %x, MarshalVT %x", key, got, want)
		}

		in := to("x", map[string]string{"mine": "yes", allocationKeyAnnotation: "the caller's"})
		req := ForwardRequest(in, "remote-ns")
		base, err := proto.Marshal(req)
		if err != nil {
			t.Fatal(err)
		}
		msg := withKey(encodedOf(base).data, key)
		var out allocation.AllocationRequest
		if err := proto.Unmarshal(msg.data.Materialize(), &out); err != nil {
			t.Fatal(err)
		}
		//nolint:staticcheck // SA1019: the double write.
		for _, got := range []map[string]string{out.GetMetadata().GetAnnotations(), out.GetMetaPatch().GetAnnotations()} {
			if len(got) != 2 || got["mine"] != "yes" || got[allocationKeyAnnotation] != key {
				t.Errorf("key %q: the remote reads annotations %v", key, got)
			}
		}
		if out.GetNamespace() != "remote-ns" || out.GetMultiClusterSetting().GetPolicySelector().GetMatchLabels()["to"] != "x" {
			t.Errorf("the rest of the request changed: %v", &out)
		}
	}
}

func encodedOf(b []byte) *encodedRequest {
	m := new(Memo)
	var r allocation.AllocationRequest
	if err := proto.Unmarshal(b, &r); err != nil {
		panic(err)
	}
	return m.encode("", "ns", &r)
}
