package allocator_test

import (
	"bytes"
	"encoding/json"
	"flag"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/quartermaster-dev/quartermaster/allocator"
	"github.com/quartermaster-dev/quartermaster/allocator/pb/allocation"
	"github.com/quartermaster-dev/quartermaster/allocator/wire"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// goldenRequests run in order against fresh servers with the same fleets,
// seed and clock, so the answers are the same every run.
var goldenRequests = []struct {
	name string
	body string
}{
	{"packed-default", `{}`},
	{"lobby-with-actions", `{"gameServerSelectors":[{"matchLabels":{"mode":"lobby"}}],
		"counters":{"rooms":{"action":"Increment","amount":"2"}},
		"lists":{"players":{"addValues":["p1","p2","p3"]}},
		"metadata":{"labels":{"match":"m1"},"annotations":{"note":"x"}}}`},
	{"reallocate-allocated-first", `{"gameServerSelectors":[
		{"matchLabels":{"mode":"lobby"},"gameServerState":"ALLOCATED","counters":{"rooms":{"minAvailable":"1"}}},
		{"matchLabels":{"mode":"lobby"}}],
		"counters":{"rooms":{"action":"Increment","amount":"1"}}}`},
	{"distributed-other-namespace", `{"namespace":"other","scheduling":"Distributed"}`},
	{"deprecated-required-preferred", `{"requiredGameServerSelector":{"matchLabels":{"mode":"deathmatch"}},
		"preferredGameServerSelectors":[{"matchLabels":{"mode":"none"}}]}`},
	{"unknown-fields-ignored", `{"namespace":"default","someFutureField":{"x":1},"gameServerSelectors":[{"matchLabels":{"mode":"deathmatch"}}]}`},
	{"no-match", `{"gameServerSelectors":[{"matchLabels":{"mode":"nothing-has-this"}}]}`},
	{"bad-enum", `{"scheduling":"Distributd"}`},
	{"negative-amount", `{"counters":{"rooms":{"action":"Increment","amount":"-1"}}}`},
	{"unknown-action", `{"counters":{"rooms":{"action":"Multiply","amount":"2"}}}`},
	{"bad-label", `{"gameServerSelectors":[{"matchLabels":{"mode":"not a valid value!"}}]}`},
	{"min-above-max", `{"gameServerSelectors":[{"counters":{"rooms":{"minCount":"5","maxCount":"1"}}}]}`},
	{"multicluster-without-policies", `{"multiClusterSetting":{"enabled":true}}`},
	{"not-json", `{"namespace":`},
	{"bad-namespace", `{"namespace":"Not_A_Namespace"}`},
}

// answer is what a caller sees, the same shape for both protocols: the
// HTTP status and the REST body (for gRPC, the response in proto3 JSON or
// the status as grpc-gateway renders it).
type answer struct {
	HTTP int             `json:"http"`
	Body json.RawMessage `json:"body"`
}

func TestGRPCAndRESTGiveTheSameAnswers(t *testing.T) {
	now := func() time.Time { return time.Date(2026, 8, 1, 12, 0, 0, 0, time.UTC) }
	viaGRPC := startHarness(t, harnessOpts{now: now})
	viaREST := startHarness(t, harnessOpts{now: now})
	viaOwnPort := startHarness(t, harnessOpts{now: now, restAddr: "127.0.0.1:0"})
	conn := viaGRPC.dial(nil)
	h2 := viaREST.httpClient(nil, true)
	h1 := viaOwnPort.httpClient(nil, false)

	for _, r := range goldenRequests {
		t.Run(r.name, func(t *testing.T) {
			var got [3]answer
			// gRPC: decode the JSON as a client would have built the message.
			in, err := decodeForGRPC([]byte(r.body))
			if err != nil {
				got[0] = answer{400, statusJSON(t, err)}
			} else if resp, err := viaGRPC.grpcAllocate(conn, in); err != nil {
				got[0] = answer{allocator.HTTPStatus(status.Code(err)), statusJSON(t, err)}
			} else {
				got[0] = answer{200, mustJSON(t, resp)}
			}
			for i, c := range []struct {
				h      *harness
				client *http.Client
			}{{viaREST, h2}, {viaOwnPort, h1}} {
				code, body, err := c.h.post(c.client, allocator.AllocatePath, []byte(r.body))
				if err != nil {
					t.Fatal(err)
				}
				got[i+1] = answer{code, compact(t, body)}
			}
			if !bytes.Equal(canon(t, got[0]), canon(t, got[1])) || !bytes.Equal(canon(t, got[1]), canon(t, got[2])) {
				t.Fatalf("answers differ:\ngRPC:             %s\nREST shared port: %s\nREST own port:    %s", canon(t, got[0]), canon(t, got[1]), canon(t, got[2]))
			}
			golden(t, filepath.Join("testdata", "golden", r.name+".json"), canon(t, got[1]))
		})
	}
}

func decodeForGRPC(b []byte) (*allocation.AllocationRequest, error) {
	in, err := wire.DecodeJSONRequest(b)
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	return in, nil
}

func statusJSON(t *testing.T, err error) json.RawMessage {
	st := status.Convert(err)
	b, _ := json.Marshal(struct {
		Code    int      `json:"code"`
		Message string   `json:"message"`
		Details []string `json:"details"`
	}{int(st.Code()), st.Message(), []string{}})
	return b
}

func compact(t *testing.T, b []byte) json.RawMessage {
	var out bytes.Buffer
	if err := json.Compact(&out, b); err != nil {
		t.Fatalf("not JSON: %s", b)
	}
	return out.Bytes()
}

func canon(t *testing.T, a answer) []byte {
	b, err := json.MarshalIndent(a, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	return append(b, '\n')
}

func golden(t *testing.T, path string, got []byte) {
	t.Helper()
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -run %s -update to create it)", err, t.Name())
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from the golden file:\ngot:\n%s\nwant:\n%s\n(re-record with -update only when the change is understood)", path, got, want)
	}
}
