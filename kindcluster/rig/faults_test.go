package rig

import (
	"context"
	"errors"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
)

type recordingPatcher struct {
	name, patch string
	pt          types.PatchType
	err         error
}

func (p *recordingPatcher) Patch(_ context.Context, name string, pt types.PatchType, data []byte, _ metav1.PatchOptions, _ ...string) (*unstructured.Unstructured, error) {
	p.name, p.pt, p.patch = name, pt, string(data)
	return nil, p.err
}

func TestScaleFleetPatchesReplicasOnly(t *testing.T) {
	p := &recordingPatcher{}
	if err := ScaleFleet(context.Background(), p, "game", 7); err != nil {
		t.Fatal(err)
	}
	if p.name != "game" || p.pt != types.MergePatchType || p.patch != `{"spec":{"replicas":7}}` {
		t.Fatalf("patched %q with %s %s; want game, a merge patch of spec.replicas to 7", p.name, p.pt, p.patch)
	}
	if err := ScaleFleet(context.Background(), p, "game", -1); err == nil || !strings.Contains(err.Error(), "negative") {
		t.Fatalf("scale to -1: got %v, want an error about a negative count", err)
	}
	p.err = errors.New("forbidden")
	if err := ScaleFleet(context.Background(), p, "game", 3); err == nil || !strings.Contains(err.Error(), "scale fleet game to 3: forbidden") {
		t.Fatalf("a failed patch: got %v, want it named", err)
	}
}

func TestForwarderIdentityIsTheCertificatesName(t *testing.T) {
	if got := ForwarderIdentity("cloud"); got != forwarderPrefix+"cloud" {
		t.Fatalf("ForwarderIdentity(cloud) = %q", got)
	}
}
