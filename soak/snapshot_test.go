package soak

import (
	"bytes"
	"reflect"
	"strings"
	"testing"
)

func TestSnapshotRoundTrip(t *testing.T) {
	s := snap(gs("a", "gs-1", "Allocated", "alice"), FromObject("b", "default", "gs-2", "Ready",
		map[string]string{OwnerAnnotation: "bob", LastAllocatedAnnotation: "2026-01-02T03:00:01Z", "match": "m1"}))
	var b bytes.Buffer
	if err := WriteSnapshot(&b, s); err != nil {
		t.Fatal(err)
	}
	got, err := ReadSnapshot(&b)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, s) {
		t.Errorf("round trip:\n got %+v\nwant %+v", got, s)
	}
	if g := got.GameServers[1]; g.Owner != "bob" || g.LastAllocated != "2026-01-02T03:00:01Z" || len(g.Annotations) != 1 || g.Annotations["match"] != "m1" {
		t.Errorf("FromObject: %+v", g)
	}
}

func TestReadSnapshotErrors(t *testing.T) {
	cases := []struct{ name, in, want string }{
		{"not JSON", "{", "snapshot: unexpected EOF"},
		{"unknown field", `{"clusters":[{"name":"a"}],"servers":[]}`, `snapshot: unknown field "servers"`},
		{"no clusters", `{"gameServers":[]}`, "snapshot: field clusters is empty"},
		{"cluster without name", `{"clusters":[{}]}`, "snapshot: clusters[0]: field name is missing"},
		{"cluster twice", `{"clusters":[{"name":"a"},{"name":"a"}]}`, `snapshot: clusters[1]: cluster "a" is listed twice`},
		{"server on an unlisted cluster", `{"clusters":[{"name":"a"}],"gameServers":[{"cluster":"b","name":"gs","state":"Ready"}]}`, `snapshot: gameServers[0]: field cluster: "b" is not in clusters`},
		{"server on an unread cluster", `{"clusters":[{"name":"a","error":"down"}],"gameServers":[{"cluster":"a","name":"gs","state":"Ready"}]}`, `"a" could not be read, yet has servers`},
		{"server without name", `{"clusters":[{"name":"a"}],"gameServers":[{"cluster":"a","state":"Ready"}]}`, "snapshot: gameServers[0]: field name is missing"},
		{"server without state", `{"clusters":[{"name":"a"}],"gameServers":[{"cluster":"a","name":"gs"}]}`, "snapshot: gameServers[0] (gs): field state is missing"},
		{"server twice", `{"clusters":[{"name":"a"}],"gameServers":[{"cluster":"a","name":"gs","state":"Ready"},{"cluster":"a","name":"gs","state":"Ready"}]}`, "snapshot: gameServers[1]: a/gs is listed twice"},
		{"two documents", `{"clusters":[{"name":"a"}]} {}`, "one JSON document expected"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ReadSnapshot(strings.NewReader(tc.in))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
}
