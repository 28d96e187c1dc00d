package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/quartermaster-dev/quartermaster/kindcluster/kind"
	"github.com/quartermaster-dev/quartermaster/kindcluster/rig"
	"github.com/quartermaster-dev/quartermaster/scenarios/live"
)

// The kind provider of `qm cluster up/down --topology`: the same topology
// as kind clusters (kindcluster/kind), for machines with Docker.

type kindFlags struct {
	image   *string
	noBuild *bool
}

func addKindFlags(fs *flag.FlagSet) kindFlags {
	return kindFlags{
		image:   fs.String("image", kind.DefaultImage, "with --provider kind: the qm image the clusters run"),
		noBuild: fs.Bool("no-build", false, "with --provider kind: use --image as it is in Docker instead of building it from the Dockerfile"),
	}
}

// singleClusterFlags refuses, without --topology, the flags that only a
// topology's rig reads: --provider kind (a kind rig is a topology's
// clusters; the single cluster is always local processes) and the kind
// flags, which would otherwise be ignored without a word.
func singleClusterFlags(fs *flag.FlagSet, provider string) error {
	switch provider {
	case "", rig.ProviderLocal:
	case rig.ProviderKind:
		return fmt.Errorf("--provider kind needs --topology FILE: a kind rig brings up a topology's clusters (examples/topologies has some); without --topology the cluster is local processes")
	default:
		return fmt.Errorf("--provider %q: want %s or %s, with --topology", provider, rig.ProviderLocal, rig.ProviderKind)
	}
	var kindOnly []string
	fs.Visit(func(f *flag.Flag) {
		if f.Name == "image" || f.Name == "no-build" {
			kindOnly = append(kindOnly, "--"+f.Name)
		}
	})
	if len(kindOnly) > 0 {
		return fmt.Errorf("%s: only with --topology and --provider kind", strings.Join(kindOnly, ", "))
	}
	return nil
}

// loadRigTopology loads a topology and settles its provider: the flag if
// given, else the file's spec.provider (local unless it says kind).
func loadRigTopology(file, provider string) (_ *rig.Topology, onKind bool, err error) {
	t, err := live.LoadTopology(file)
	if err != nil {
		return nil, false, err
	}
	switch provider {
	case "":
	case rig.ProviderLocal, rig.ProviderKind:
		t.Spec.Provider = provider
	default:
		return nil, false, fmt.Errorf("--provider %q: want %s or %s", provider, rig.ProviderLocal, rig.ProviderKind)
	}
	return t, t.Spec.Provider == rig.ProviderKind, nil
}

func kindUp(ctx context.Context, t *rig.Topology, dir string, dryRun bool, wait time.Duration, kf kindFlags, stdout, stderr io.Writer) error {
	for _, n := range t.NotModelled() {
		fmt.Fprintln(stderr, "note: not modelled live:", n)
	}
	if t.Spec.Links.Callers != (rig.Link{}) || t.Spec.Links.Clusters != (rig.Link{}) || len(t.Spec.Links.Overrides) > 0 {
		fmt.Fprintln(stderr, "note: on kind, spec.links applies between clusters (latency proxies in this process, where kind's pods reach this host); callers reach the allocators directly at the addresses printed")
	}
	opts := kind.Options{Dir: dir, Image: *kf.image, Build: !*kf.noBuild, Wait: wait, Log: stderr}
	if dryRun {
		opts.Runner = &kind.DryRun{Out: stdout}
		opts.Log = nil
	} else if err := kind.Check(ctx, opts, nil); err != nil {
		return err
	}
	r, err := kind.Up(ctx, t, opts)
	if err != nil {
		return err
	}
	defer func() { _ = r.Stop() }()
	if dryRun {
		return r.Stop()
	}
	fmt.Fprintf(stdout, "rig %q is up on kind (%s)\n", t.Metadata.Name, r.Dir)
	for i, c := range r.Clusters {
		spec := t.Spec.Clusters[i]
		fmt.Fprintf(stdout, "\ncluster %s (kind cluster %s; provider %s, region %s)\n", c.Name, c.Kind, spec.Provider, spec.Region)
		fmt.Fprintf(stdout, "  kubeconfig: %s\n", c.Kubeconfig)
		fmt.Fprintf(stdout, "  allocator:  %s (%d replica(s))\n", c.CallerAddr, *spec.Allocator.Replicas)
		fmt.Fprintf(stdout, "  allocate:   qm allocate --addr %s --certs-dir %s --identity %s --multicluster\n", c.CallerAddr, r.Certs.Dir, kind.CallerIdentity)
	}
	fmt.Fprintf(stdout, "\nclient certificates: %s (identity %q)\n", r.Certs.Dir, kind.CallerIdentity)
	fmt.Fprintf(stdout, "Ctrl-C here, or 'qm cluster down --topology FILE --provider kind', deletes the kind clusters and %s.\n", r.Dir)
	<-ctx.Done()
	fmt.Fprintln(stderr, "deleting rig", t.Metadata.Name)
	return r.Stop()
}

func kindDown(t *rig.Topology, dir string, grace time.Duration, stdout, stderr io.Writer) error {
	if dir == "" {
		dir = kind.DefaultDir(t.Metadata.Name)
	}
	if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("no kind rig in %s", dir)
	}
	if err := kind.Down(dir, nil, grace, stderr); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "kind rig in %s deleted\n", dir)
	return nil
}

// clusterCheck: exit 0 when the provider can run here, 3 with everything
// missing on one line of stdout when it cannot (make e2e-multicluster
// PROVIDER=kind turns that into SKIPPED, or a failure with KIND_REQUIRED),
// 1 on any other failure. --image and --no-build say what `up` would be
// given: without --no-build the image is built, so it need not be there.
func clusterCheck(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("qm cluster check", flag.ContinueOnError)
	provider := fs.String("provider", rig.ProviderKind, "the provider to check: kind (local needs only the bin/ binaries)")
	kf := addKindFlags(fs)
	if _, ok, err := parseFlags("cluster check", clusterUsage+"\nflags of 'check':\n", fs, args, stdout, stderr); !ok {
		return err
	}
	if *provider != rig.ProviderKind {
		return usageFail(stderr, "cluster check", nil, "--provider %q: only kind has prerequisites to check", *provider)
	}
	err := kind.Check(ctx, kind.Options{Image: *kf.image, Build: !*kf.noBuild}, nil)
	var m *kind.MissingError
	switch {
	case errors.As(err, &m):
		fmt.Fprintln(stdout, strings.TrimSpace(m.Error()))
		return exitError{3}
	case err != nil:
		return err
	}
	fmt.Fprintln(stdout, "kind provider: ready (Docker answers, kind's node image and the qm image are here or will be built, kubectl found)")
	return nil
}
