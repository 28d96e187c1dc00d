package main

import (
	"context"
	"flag"
	"io"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/quartermaster-dev/quartermaster/allocator"
	qmv1 "github.com/quartermaster-dev/quartermaster/allocator/pb/quartermaster/v1"
)

func init() {
	register(command{
		name:    "create",
		summary: "have a game server made for the caller from a template, and allocated to it (Quartermaster's AllocationAdmin API)",
		run:     runCreate,
	})
	register(command{
		name:    "destroy",
		summary: "delete a game server the caller holds; it is not replaced (Quartermaster's AllocationAdmin API)",
		run:     runDestroy,
	})
}

// defaultCreateTimeout is qm create's deadline: a new server has to start,
// which takes longer than an allocation from a warm fleet.
const defaultCreateTimeout = time.Minute

func runCreate(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("qm create", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var c connFlags
	c.register(fs)
	c.timeout = defaultCreateTimeout
	fs.Lookup("timeout").DefValue = defaultCreateTimeout.String()
	fs.Lookup("timeout").Usage = "deadline for the call: the server must be Ready by then, or it is deleted"
	in := &qmv1.CreateRequest{}
	fs.StringVar(&in.Template, "template", "", "the template to create from, as the allocator's --templates file names it (required)")
	fs.StringVar(&in.Name, "name", "", "the new game server's name (default: the template's name and a random suffix)")
	usage, ok, err := parseFlags("create", "usage: qm create --template NAME [flags]\n\nHas a game server made from a template of the allocator's, waits until it\nis Ready, and prints it, allocated to the caller, as JSON. A server that is\nnot Ready by --timeout is deleted again.\n\nflags:\n", fs, args, stdout, stderr)
	if !ok {
		return err
	}
	if in.Template == "" {
		return usageFail(stderr, "create", usage, "--template is required")
	}
	out := &qmv1.CreateResponse{}
	if err := adminCall(ctx, &c, allocator.CreatePath, in, out, func(ctx context.Context, cl qmv1.AllocationAdminClient) (proto.Message, error) {
		return cl.Create(ctx, in)
	}); err != nil {
		return callFailed(stderr, "create", err)
	}
	return printMessage(stdout, out)
}

func runDestroy(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("qm destroy", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var c connFlags
	c.register(fs)
	in := &qmv1.DestroyRequest{}
	fs.StringVar(&in.Namespace, "namespace", "", "the game server's namespace (default: \"default\")")
	fs.StringVar(&in.GameServerName, "name", "", "the game server to delete (required)")
	usage, ok, err := parseFlags("destroy", "usage: qm destroy --name GAMESERVER [flags]\n\nDeletes a game server the caller holds (one it created, or allocated\nfrom a fleet, which replaces it).\n\nflags:\n", fs, args, stdout, stderr)
	if !ok {
		return err
	}
	if in.GameServerName == "" {
		return usageFail(stderr, "destroy", usage, "--name is required")
	}
	out := &qmv1.DestroyResponse{}
	if err := adminCall(ctx, &c, allocator.DestroyPath, in, out, func(ctx context.Context, cl qmv1.AllocationAdminClient) (proto.Message, error) {
		return cl.Destroy(ctx, in)
	}); err != nil {
		return callFailed(stderr, "destroy", err)
	}
	return printMessage(stdout, out)
}
