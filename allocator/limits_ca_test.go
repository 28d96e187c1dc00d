package allocator_test

import (
	"maps"
	"strings"
	"testing"

	"github.com/quartermaster-dev/quartermaster/allocator"
)

func TestLimitsClientCABindings(t *testing.T) {
	c, err := allocator.ParseLimits([]byte(`
apiVersion: quartermaster.dev/v1alpha1
kind: AllocatorLimits
default: {clientCA: matchmakers.pem}
identities:
  ops: {admin: true, clientCA: ops-ca.crt}
  mm: {}
`))
	if err != nil {
		t.Fatal(err)
	}
	by, fallback := c.ClientCABindings()
	if want := map[string]string{"ops": "ops-ca.crt", "mm": ""}; !maps.Equal(by, want) || fallback != "matchmakers.pem" {
		t.Errorf("bindings %v, default %q", by, fallback)
	}
	for _, bad := range []string{"../ca.crt", "dir/ca.crt", "ca.key", ".hidden.crt"} {
		_, err := allocator.ParseLimits([]byte("apiVersion: quartermaster.dev/v1alpha1\nkind: AllocatorLimits\nidentities:\n  ops: {clientCA: \"" + bad + "\"}\n"))
		if err == nil || !strings.Contains(err.Error(), `identities["ops"].clientCA: "`+bad+`" is not the name of a *.crt or *.pem file`) {
			t.Errorf("clientCA %q: %v", bad, err)
		}
	}
}
