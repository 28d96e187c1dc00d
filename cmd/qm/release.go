package main

import (
	"context"
	"flag"
	"io"

	"google.golang.org/protobuf/proto"

	"github.com/quartermaster-dev/quartermaster/allocator"
	qmv1 "github.com/quartermaster-dev/quartermaster/allocator/pb/quartermaster/v1"
)

func init() {
	register(command{
		name:    "list",
		summary: "list the caller's allocations (Quartermaster's AllocationAdmin API)",
		run:     runList,
	})
	register(command{
		name:    "release",
		summary: "give an allocated game server back (Quartermaster's AllocationAdmin API)",
		run:     runRelease,
	})
}

func runList(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("qm list", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var c connFlags
	c.register(fs)
	in := &qmv1.ListRequest{}
	fs.StringVar(&in.Namespace, "namespace", "", "only this namespace (default: all)")
	fs.StringVar(&in.Owner, "owner", "", "admins: list this identity's allocations")
	fs.BoolVar(&in.AllOwners, "all", false, "admins: list every identity's allocations")
	if _, ok, err := parseFlags("list", "usage: qm list [flags]\n\nPrints the caller's current allocations as JSON, oldest first.\n\nflags:\n", fs, args, stdout, stderr); !ok {
		return err
	}
	out := &qmv1.ListResponse{}
	if err := adminCall(ctx, &c, allocator.ListPath, in, out, func(ctx context.Context, cl qmv1.AllocationAdminClient) (proto.Message, error) {
		return cl.List(ctx, in)
	}); err != nil {
		return callFailed(stderr, "list", err)
	}
	return printMessage(stdout, out)
}

func runRelease(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("qm release", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var c connFlags
	c.register(fs)
	in := &qmv1.ReleaseRequest{}
	fs.StringVar(&in.Namespace, "namespace", "", "the game server's namespace (default: \"default\")")
	fs.StringVar(&in.GameServerName, "name", "", "the game server to give back (this or --allocation-key)")
	fs.StringVar(&in.AllocationKey, "allocation-key", "", "instead of --name: the allocation you made with this idempotency key")
	fs.StringVar(&in.Source, "source", "", "the allocation's \"source\" when a multi-cluster request was forwarded: the allocator you call passes the Release on to that one")
	usage, ok, err := parseFlags("release", "usage: qm release --name GAMESERVER | --allocation-key KEY [flags]\n\nGives an allocation back: the game server is shut down and replaced.\n\nflags:\n", fs, args, stdout, stderr)
	if !ok {
		return err
	}
	if (in.GameServerName == "") == (in.AllocationKey == "") {
		return usageFail(stderr, "release", usage, "give one of --name and --allocation-key")
	}
	out := &qmv1.ReleaseResponse{}
	if err := adminCall(ctx, &c, allocator.ReleasePath, in, out, func(ctx context.Context, cl qmv1.AllocationAdminClient) (proto.Message, error) {
		return cl.Release(ctx, in)
	}); err != nil {
		return callFailed(stderr, "release", err)
	}
	return printMessage(stdout, out)
}

func adminCall(ctx context.Context, c *connFlags, path string, in, out proto.Message, call func(context.Context, qmv1.AllocationAdminClient) (proto.Message, error)) error {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	if c.rest {
		return c.postJSON(ctx, path, in, out)
	}
	conn, err := c.dialGRPC()
	if err != nil {
		return err
	}
	defer conn.Close()
	got, err := call(ctx, qmv1.NewAllocationAdminClient(conn))
	if err != nil {
		return err
	}
	proto.Merge(out, got)
	return nil
}
