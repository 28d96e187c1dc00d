package wire

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/quartermaster-dev/quartermaster/allocator/pb/allocation"
	"google.golang.org/protobuf/proto"
)

// FuzzDecodeJSONRequest feeds arbitrary REST bodies through everything the
// REST endpoint does with them before the core sees them. Nothing may panic,
// and whatever decodes must survive a JSON round trip unchanged.
//
//	go test -run '^$' -fuzz FuzzDecodeJSONRequest -fuzztime 30s ./allocator/wire/
func FuzzDecodeJSONRequest(f *testing.F) {
	inputs, _ := filepath.Glob(filepath.Join("testdata", "request-*.in.json"))
	for _, in := range inputs {
		if b, err := os.ReadFile(in); err == nil {
			f.Add(b)
		}
	}
	for _, s := range []string{
		``, `{}`, `null`, `[]`, `{"scheduling":7}`, `{"scheduling":"Spread"}`,
		`{"gameServerSelectors":[null,{"gameServerState":-1}]}`,
		`{"counters":{"":{"amount":"-9223372036854775808"}}}`,
		`{"priorities":[{"type":2147483647,"order":"Descending"}]}`,
		`{"lists":{"l":{"capacity":{"value":1}}}}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		req, err := DecodeJSONRequest(body)
		if err != nil {
			return
		}
		_, _ = RequestToCore(req)

		out, err := MarshalJSON(req)
		if err != nil {
			t.Fatalf("a decoded request does not encode: %v", err)
		}
		again, err := DecodeJSONRequest(out)
		if err != nil {
			t.Fatalf("re-decoding %s: %v", out, err)
		}
		if !proto.Equal(req, again) {
			t.Fatalf("JSON round trip changed the request:\n%v\n%v", req, again)
		}
	})
}

// FuzzDecodeProtoRequest does the same for gRPC's binary form.
func FuzzDecodeProtoRequest(f *testing.F) {
	f.Add([]byte{})
	f.Add(cat(fVarint(reqScheduling, 9), fMsg(reqSelectors, fVarint(selState, 5))))
	f.Add(fEntry(reqCounters, "c", fMsg(caAmount, fVarint(wrapperValue, 1<<63))))
	f.Fuzz(func(t *testing.T, b []byte) {
		req := &allocation.AllocationRequest{}
		if proto.Unmarshal(b, req) != nil {
			return
		}
		_, _ = RequestToCore(req)
		_, _ = MarshalJSON(req)
	})
}
