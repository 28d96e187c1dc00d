package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/quartermaster-dev/quartermaster/allocator"
	"github.com/quartermaster-dev/quartermaster/allocator/mtls"
	"github.com/quartermaster-dev/quartermaster/allocator/pb/allocation"
	"github.com/quartermaster-dev/quartermaster/allocator/wire"
	"github.com/quartermaster-dev/quartermaster/core"
)

func init() {
	register(command{
		name:    "allocate",
		summary: "allocate a game server from an allocator (gRPC or REST)",
		run:     runAllocate,
	})
}

const allocateUsage = `usage: qm allocate [flags]

Sends one AllocationRequest to an allocator (Quartermaster's or Agones') and
prints the AllocationResponse as JSON. On failure it prints the status and
exits with the gRPC code (8 ResourceExhausted, 3 InvalidArgument, ...).

The request comes from the flags, or from --request FILE (JSON, as for REST;
"-" for stdin). Examples:

  qm allocate --selector mode=lobby --counter rooms=Increment:1
  qm allocate --rest --namespace ranked --selector region=eu --label match=42
  qm allocate --selector mode=lobby --state Allocated --selector mode=lobby
  qm allocate --multicluster --policy-selector route=burst
  qm allocate --selector mode=lobby --allocation-key match-42   # retry safely: same key, same server

Credentials as in Agones' client example (--cert, --key, --cacert), or a
directory made by 'qm serve'/'qm certs' with --certs-dir and --identity.

Against Agones' own allocator: the namespace is always sent ("default"
unless --namespace says otherwise; Agones allocates nothing for an empty
one), the client certificate is its allocator-client Secret's (--cert,
--key, --cacert), and what is allocated stays Allocated until the game
server shuts down: Agones has no Release, so qm release and its --source
(the cluster a forwarded allocation came from) are for Quartermaster only.

flags:
`

// connFlags are the connection flags shared by allocate, list and release.
type connFlags struct {
	addr                       string
	rest                       bool
	transportSet               string // the --rest or --grpc flag given first, to refuse a contradiction
	cert, key, cacert, sni     string
	certsDir, identity         string
	insecure, insecureNoVerify bool
	timeout                    time.Duration
}

func (c *connFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&c.addr, "addr", "localhost:8443", "allocator address host:port")
	fs.Var(transportFlag{c, "rest"}, "rest", "use REST (POST JSON) instead of gRPC")
	fs.Var(transportFlag{c, "grpc"}, "grpc", "use gRPC (the default); --grpc=false means REST")
	fs.StringVar(&c.cert, "cert", "", "client certificate file")
	fs.StringVar(&c.key, "key", "", "client private key file")
	fs.StringVar(&c.cacert, "cacert", "", "CA file to verify the server against")
	fs.StringVar(&c.sni, "server-name", "", "name to verify the server certificate against (default: the host in --addr)")
	fs.StringVar(&c.certsDir, "certs-dir", "", "certificate directory (qm certs layout); default: qm serve's development certificates")
	fs.StringVar(&c.identity, "identity", "dev", "client identity within --certs-dir")
	fs.BoolVar(&c.insecure, "insecure", false, "plaintext, for a server run with --insecure-disable-tls")
	fs.BoolVar(&c.insecureNoVerify, "insecure-skip-verify", false, "do not verify the server certificate (development only)")
	fs.DurationVar(&c.timeout, "timeout", 10*time.Second, "deadline for the call")
}

// transportFlag is --rest or --grpc: two names for one choice, so that
// --grpc=false means REST and --rest=false means gRPC, and giving both with
// contradicting values is an error rather than a silent winner.
type transportFlag struct {
	c    *connFlags
	name string // "rest" or "grpc"
}

func (f transportFlag) IsBoolFlag() bool { return true }

func (f transportFlag) String() string {
	if f.c == nil { // the flag package's zero value, for its defaults
		return "false"
	}
	return strconv.FormatBool(f.c.rest == (f.name == "rest"))
}

func (f transportFlag) Set(v string) error {
	on, err := strconv.ParseBool(v)
	if err != nil {
		return fmt.Errorf("want true or false")
	}
	rest := on == (f.name == "rest")
	if f.c.transportSet != "" && rest != f.c.rest {
		return fmt.Errorf("contradicts --%s given before it", f.c.transportSet)
	}
	if f.c.transportSet == "" {
		f.c.transportSet = f.name
	}
	f.c.rest = rest
	return nil
}

func (c *connFlags) tlsConfig() (*tls.Config, error) {
	if c.insecure {
		return nil, nil
	}
	var files mtls.ClientFiles
	switch {
	case c.cert != "" || c.key != "" || c.cacert != "":
		files = mtls.ClientFiles{CertFile: c.cert, KeyFile: c.key, CAFile: c.cacert}
	default:
		dir := c.certsDir
		if dir == "" {
			dir = defaultStateDir() + "/certs"
		}
		files = mtls.ClientFilesFor(dir, c.identity)
		if _, err := os.Stat(files.CertFile); err != nil {
			return nil, fmt.Errorf("no client certificate for identity %q in %s (run 'qm serve' or 'qm certs', or give --cert/--key/--cacert): %w", c.identity, dir, err)
		}
	}
	files.ServerName = c.sni
	cfg, err := mtls.ClientConfig(files)
	if err != nil {
		return nil, err
	}
	cfg.InsecureSkipVerify = c.insecureNoVerify
	return cfg, nil
}

// dialGRPC connects to the allocator.
func (c *connFlags) dialGRPC() (*grpc.ClientConn, error) {
	cfg, err := c.tlsConfig()
	if err != nil {
		return nil, err
	}
	creds := insecure.NewCredentials()
	if cfg != nil {
		creds = credentials.NewTLS(cfg)
	}
	return grpc.NewClient(c.addr, grpc.WithTransportCredentials(creds))
}

// postJSON sends a REST request and decodes a success into out.
func (c *connFlags) postJSON(ctx context.Context, path string, in, out proto.Message) error {
	cfg, err := c.tlsConfig()
	if err != nil {
		return err
	}
	body, err := wire.MarshalJSON(in)
	if err != nil {
		return err
	}
	scheme := "https"
	if cfg == nil {
		scheme = "http"
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, scheme+"://"+c.addr+path, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: cfg, ForceAttemptHTTP2: true}}
	defer client.CloseIdleConnections()
	resp, err := client.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return status.Error(codes.DeadlineExceeded, err.Error())
		}
		return status.Error(codes.Unavailable, err.Error())
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return status.Error(codes.Unavailable, err.Error())
	}
	if resp.StatusCode != http.StatusOK {
		var e struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
		}
		if json.Unmarshal(b, &e) == nil && e.Code != 0 {
			return status.Error(codes.Code(e.Code), e.Message)
		}
		return status.Errorf(codes.Unknown, "HTTP %s: %s", resp.Status, strings.TrimSpace(string(b)))
	}
	if err := wire.UnmarshalJSON(b, out); err != nil {
		return fmt.Errorf("decoding the response: %w", err)
	}
	return nil
}

// printMessage prints m as indented proto3 JSON, as the REST API writes it.
func printMessage(w io.Writer, m proto.Message) error {
	b, err := wire.MarshalJSON(m)
	if err != nil {
		return err
	}
	var out bytes.Buffer
	if err := json.Indent(&out, b, "", "  "); err != nil {
		return err
	}
	out.WriteByte('\n')
	_, err = w.Write(out.Bytes())
	return err
}

// callFailed reports a failed call and exits with its gRPC code.
func callFailed(stderr io.Writer, name string, err error) error {
	st, ok := status.FromError(err)
	if !ok {
		return err
	}
	fmt.Fprintf(stderr, "qm %s: %s (code %d): %s\n", name, st.Code(), int(st.Code()), st.Message())
	code := int(st.Code())
	if code == 0 {
		code = 1
	}
	return exitError{code: code}
}

// multiFlag collects a repeated flag.
type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }

func runAllocate(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("qm allocate", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var c connFlags
	c.register(fs)
	var labels, annotations, counters, listAdd, listDel multiFlag
	var sels selectorFlags
	namespace := fs.String("namespace", core.DefaultNamespace, "namespace to allocate in (sent as given: Agones reads an empty one as no namespace)")
	fs.Var(selectorFlag{&sels}, "selector", "a game server selector's matchLabels as key=value[,key=value...]; repeat for several, tried in order")
	fs.Var(stateFlag{&sels}, "state", "Ready or Allocated: the game server state for the --selector just before it")
	scheduling := fs.String("scheduling", "Packed", "Packed or Distributed")
	fs.Var(&labels, "label", "metadata label key=value to set on the allocated server (repeatable)")
	fs.Var(&annotations, "annotation", "metadata annotation key=value to set (repeatable)")
	fs.Var(&counters, "counter", "counter action NAME=Increment:N, NAME=Decrement:N or NAME=capacity:N (repeatable)")
	fs.Var(&listAdd, "list-add", "list action NAME=VALUE: add VALUE to list NAME (repeatable)")
	fs.Var(&listDel, "list-delete", "list action NAME=VALUE: delete VALUE from list NAME (repeatable)")
	requestFile := fs.String("request", "", "JSON AllocationRequest file (\"-\" for stdin) instead of the request flags")
	multiCluster := fs.Bool("multicluster", false, "set multiClusterSetting.enabled: the allocator tries the clusters of its GameServerAllocationPolicies")
	var policySelector multiFlag
	fs.Var(&policySelector, "policy-selector", "multiClusterSetting.policySelector matchLabels as key=value[,key=value...] (repeatable; implies --multicluster)")
	allocationKey := fs.String("allocation-key", "", "idempotency key: sent again, the same key is the same allocation (the "+allocator.AllocationKeyAnnotation+" annotation; works with --request too)")
	usage, ok, err := parseFlags("allocate", allocateUsage, fs, args, stdout, stderr)
	if !ok {
		return err
	}
	namespaceSet := false
	fs.Visit(func(f *flag.Flag) { namespaceSet = namespaceSet || f.Name == "namespace" })

	var req *allocation.AllocationRequest
	if *requestFile != "" {
		if len(sels.list)+len(labels)+len(annotations)+len(counters)+len(listAdd)+len(listDel) > 0 {
			return usageFail(stderr, "allocate", usage, "--request cannot be combined with the request flags (only --namespace may override it)")
		}
		var b []byte
		var err error
		if *requestFile == "-" {
			b, err = io.ReadAll(io.LimitReader(os.Stdin, 16<<20))
		} else {
			b, err = os.ReadFile(*requestFile)
		}
		if err != nil {
			return err
		}
		if req, err = wire.DecodeJSONRequest(b); err != nil {
			return fmt.Errorf("%s: %w", *requestFile, err)
		}
		if namespaceSet || req.Namespace == "" {
			req.Namespace = *namespace
		}
	} else {
		var err error
		req, err = buildRequest(*namespace, sels.list, *scheduling, labels, annotations, counters, listAdd, listDel)
		if err != nil {
			return usageFail(stderr, "allocate", usage, "%v", err)
		}
	}

	if *allocationKey != "" {
		if req.Metadata == nil {
			req.Metadata = &allocation.MetaPatch{}
		}
		if req.Metadata.Annotations == nil {
			req.Metadata.Annotations = map[string]string{}
		}
		req.Metadata.Annotations[allocator.AllocationKeyAnnotation] = *allocationKey
	}

	if *multiCluster || len(policySelector) > 0 {
		if err := setMultiCluster(req, policySelector); err != nil {
			return usageFail(stderr, "allocate", usage, "%v", err)
		}
	}

	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	resp := &allocation.AllocationResponse{}
	if c.rest {
		if err := c.postJSON(ctx, allocator.AllocatePath, req, resp); err != nil {
			return callFailed(stderr, "allocate", err)
		}
	} else {
		conn, err := c.dialGRPC()
		if err != nil {
			return err
		}
		defer conn.Close()
		if resp, err = allocation.NewAllocationServiceClient(conn).Allocate(ctx, req); err != nil {
			return callFailed(stderr, "allocate", err)
		}
	}
	return printMessage(stdout, resp)
}

// setMultiCluster turns on multi-cluster allocation in req, with the
// policy selector's labels from --policy-selector.
func setMultiCluster(req *allocation.AllocationRequest, selectors multiFlag) error {
	mc := req.GetMultiClusterSetting()
	if mc == nil {
		mc = &allocation.MultiClusterSetting{}
		req.MultiClusterSetting = mc
	}
	mc.Enabled = true
	for _, s := range selectors {
		m, err := parsePairs(s, ",")
		if err != nil {
			return fmt.Errorf("--policy-selector: %v", err)
		}
		if mc.PolicySelector == nil {
			mc.PolicySelector = &allocation.LabelSelector{MatchLabels: map[string]string{}}
		}
		if mc.PolicySelector.MatchLabels == nil {
			mc.PolicySelector.MatchLabels = map[string]string{}
		}
		for k, v := range m {
			mc.PolicySelector.MatchLabels[k] = v
		}
	}
	return nil
}

// buildRequest makes an AllocationRequest from the flags.
func buildRequest(namespace string, selectors []*allocation.GameServerSelector, scheduling string,
	labels, annotations, counters, listAdd, listDel multiFlag) (*allocation.AllocationRequest, error) {
	req := &allocation.AllocationRequest{Namespace: namespace}
	switch scheduling {
	case "Packed":
	case "Distributed":
		req.Scheduling = allocation.AllocationRequest_Distributed
	default:
		return nil, fmt.Errorf("--scheduling %q: want Packed or Distributed", scheduling)
	}
	req.GameServerSelectors = selectors
	if len(labels)+len(annotations) > 0 {
		req.Metadata = &allocation.MetaPatch{Labels: map[string]string{}, Annotations: map[string]string{}}
		for _, l := range labels {
			k, v, ok := strings.Cut(l, "=")
			if !ok {
				return nil, fmt.Errorf("--label %q: want key=value", l)
			}
			req.Metadata.Labels[k] = v
		}
		for _, a := range annotations {
			k, v, ok := strings.Cut(a, "=")
			if !ok {
				return nil, fmt.Errorf("--annotation %q: want key=value", a)
			}
			req.Metadata.Annotations[k] = v
		}
	}
	for _, c := range counters {
		name, spec, ok := strings.Cut(c, "=")
		action, amount, ok2 := strings.Cut(spec, ":")
		n, err := strconv.ParseInt(amount, 10, 64)
		if !ok || !ok2 || err != nil || name == "" {
			return nil, fmt.Errorf("--counter %q: want NAME=Increment:N, NAME=Decrement:N or NAME=capacity:N", c)
		}
		if req.Counters == nil {
			req.Counters = map[string]*allocation.CounterAction{}
		}
		ca := req.Counters[name]
		if ca == nil {
			ca = &allocation.CounterAction{}
			req.Counters[name] = ca
		}
		if strings.EqualFold(action, "capacity") {
			ca.Capacity = wrapperspb.Int64(n)
		} else {
			ca.Action, ca.Amount = wrapperspb.String(action), wrapperspb.Int64(n)
		}
	}
	for i, group := range []multiFlag{listAdd, listDel} {
		for _, l := range group {
			name, v, ok := strings.Cut(l, "=")
			if !ok || name == "" {
				return nil, fmt.Errorf("list action %q: want NAME=VALUE", l)
			}
			if req.Lists == nil {
				req.Lists = map[string]*allocation.ListAction{}
			}
			la := req.Lists[name]
			if la == nil {
				la = &allocation.ListAction{}
				req.Lists[name] = la
			}
			if i == 0 {
				la.AddValues = append(la.AddValues, v)
			} else {
				la.DeleteValues = append(la.DeleteValues, v)
			}
		}
	}
	return req, nil
}

// selectorFlags collects --selector and --state in command-line order: a
// --state applies to the selector just before it.
type selectorFlags struct {
	list []*allocation.GameServerSelector
}

type selectorFlag struct{ s *selectorFlags }

func (f selectorFlag) String() string { return "" }
func (f selectorFlag) Set(v string) error {
	m, err := parsePairs(v, ",")
	if err != nil {
		return err
	}
	f.s.list = append(f.s.list, &allocation.GameServerSelector{MatchLabels: m})
	return nil
}

type stateFlag struct{ s *selectorFlags }

func (f stateFlag) String() string { return "" }
func (f stateFlag) Set(v string) error {
	var st allocation.GameServerSelector_GameServerState
	switch strings.ToLower(v) {
	case "ready":
		st = allocation.GameServerSelector_READY
	case "allocated":
		st = allocation.GameServerSelector_ALLOCATED
	default:
		return fmt.Errorf("want Ready or Allocated")
	}
	if len(f.s.list) == 0 {
		// A state with no labels: a selector of its own.
		f.s.list = append(f.s.list, &allocation.GameServerSelector{})
	}
	f.s.list[len(f.s.list)-1].GameServerState = st
	return nil
}

func parsePairs(s, sep string) (map[string]string, error) {
	m := map[string]string{}
	for _, p := range strings.Split(s, sep) {
		k, v, ok := strings.Cut(p, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("%q is not key=value", p)
		}
		m[k] = v
	}
	return m, nil
}
