package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"

	// Policy windows name time zones; the binary carries the zone
	// database so that they load where the system has none (distroless
	// images, minimal containers).
	_ "time/tzdata"

	"github.com/quartermaster-dev/quartermaster/allocator/forward"
	"github.com/quartermaster-dev/quartermaster/allocator/forward/kubesource"
	"github.com/quartermaster-dev/quartermaster/core"
)

func init() {
	register(command{
		name:    "policies",
		summary: "show which multi-cluster policies are in force now or at a given time",
		run:     runPolicies,
	})
}

const policiesUsage = `usage: qm policies [--policies FILE | --kubeconfig F] [--namespace N] [--at RFC3339] [--for 168h] [--zone Europe/Paris]

Prints the GameServerAllocationPolicies and whether each is in force at
--at (default: now), by its quartermaster.dev/window-* annotations, with
when that next changes; with --for, every change of the policies in force
over that span, as an allocator would make them. The policies come from a
--policies file or directory (as qm serve reads it), else from the API
server of --kubeconfig (default $KUBECONFIG). A policy whose window is
malformed is named with the reason, and the exit status is 1: qm serve
refuses such a file, and an allocator watching the API server skips the
policy.

flags:
`

func runPolicies(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("qm policies", flag.ContinueOnError)
	file := fs.String("policies", "", "policies file or directory (the format of qm serve --policies)")
	kubeconfig := fs.String("kubeconfig", "", "read the policies from this cluster's API server (default: $KUBECONFIG) when --policies is not given")
	namespace := fs.String("namespace", "", "only this namespace (default: every namespace)")
	atFlag := fs.String("at", "", "the instant to evaluate, RFC 3339 with an offset (default: now)")
	span := fs.Duration("for", 0, "also list every change of the policies in force from --at over this long (up to 400 days)")
	zoneFlag := fs.String("zone", "UTC", "time zone the times are printed in (an IANA name)")
	usage, ok, err := parseFlags("policies", policiesUsage, fs, args, stdout, stderr)
	if !ok {
		return err
	}
	at := time.Now()
	if *atFlag != "" {
		if at, err = core.ParseInstant(*atFlag); err != nil {
			return usageFail(stderr, "policies", usage, "--at: %v", err)
		}
	}
	if *span < 0 || *span > 400*24*time.Hour {
		return usageFail(stderr, "policies", usage, "--for must be from 0 to 400 days (9600h), got %v", *span)
	}
	zone, err := time.LoadLocation(*zoneFlag)
	if err != nil || *zoneFlag == "Local" {
		return usageFail(stderr, "policies", usage, "--zone %q: want an IANA time zone such as Europe/Paris, or UTC", *zoneFlag)
	}

	var table *forward.PolicyTable
	var skipped []string
	if *file != "" {
		if *kubeconfig != "" {
			return usageFail(stderr, "policies", usage, "give --policies or --kubeconfig, not both")
		}
		set, err := forward.LoadPolicies(*file)
		if err != nil {
			return err
		}
		table = set.PolicyTable()
	} else {
		if table, skipped, err = kubePolicies(ctx, *kubeconfig, *namespace); err != nil {
			return err
		}
	}
	printPolicies(stdout, table, *namespace, at, *span, zone)
	if len(skipped) > 0 {
		for _, s := range skipped {
			fmt.Fprintln(stderr, "skipped (an allocator does not use it): "+s)
		}
		return exitError{code: 1}
	}
	return nil
}

// kubePolicies lists the policies on the API server; those that do not
// decode (a malformed window) are returned as skipped, with the reason.
func kubePolicies(ctx context.Context, kubeconfig, namespace string) (*forward.PolicyTable, []string, error) {
	rc, err := kubeRESTConfig(kubeconfig)
	if err != nil {
		return nil, nil, err
	}
	dc, err := dynamic.NewForConfig(rc)
	if err != nil {
		return nil, nil, fmt.Errorf("client: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	list, err := dc.Resource(kubesource.PoliciesResource).Namespace(namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, nil, fmt.Errorf("listing GameServerAllocationPolicies: %w", err)
	}
	byNS := map[string][]core.Policy{}
	var skipped []string
	for _, u := range list.Items {
		b, err := json.Marshal(u.Object)
		if err != nil {
			return nil, nil, err
		}
		ns, p, err := forward.PolicyFromJSON(b)
		if err != nil {
			skipped = append(skipped, fmt.Sprintf("%s/%s: %v", u.GetNamespace(), u.GetName(), err))
			continue
		}
		byNS[ns] = append(byNS[ns], p)
	}
	for _, ps := range byNS {
		sort.Slice(ps, func(i, j int) bool { return ps[i].Name < ps[j].Name })
	}
	return forward.NewPolicyTable(byNS), skipped, nil
}

// changeHorizon bounds how far ahead a policy's next change is looked for.
const changeHorizon = 366 * 24 * time.Hour

func printPolicies(w io.Writer, table *forward.PolicyTable, namespace string, at time.Time, span time.Duration, zone *time.Location) {
	stamp := func(t time.Time) string { return t.In(zone).Format(time.RFC3339) }
	var nss []string
	for _, ns := range table.Namespaces() {
		if namespace == "" || ns == namespace {
			nss = append(nss, ns)
		}
	}
	fmt.Fprintf(w, "policies at %s\n\n", stamp(at))
	if len(nss) == 0 {
		fmt.Fprintln(w, "no GameServerAllocationPolicies")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NAMESPACE\tPOLICY\tCLUSTER\tPRIORITY\tWEIGHT\tIN FORCE\tNEXT CHANGE\tWINDOW")
	for _, ns := range nss {
		for _, p := range table.Policies(ns) {
			in := "yes"
			if !p.Window.Open(at) {
				in = "no"
			}
			until := "-"
			if next, ok := p.Window.NextChange(at, at.Add(changeHorizon)); ok {
				until = stamp(next)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%s\t%s\t%s\n", ns, p.Name, p.Connection.ClusterName, p.Priority, p.Weight, in, until, p.Window)
		}
	}
	tw.Flush()
	if span <= 0 {
		return
	}
	end := at.Add(span)
	fmt.Fprintf(w, "\nchanges until %s:\n", stamp(end))
	type change struct {
		at         time.Time
		ns, before string
		after      string
	}
	var changes []change
	for _, ns := range nss {
		ps := table.Policies(ns)
		for cur := at; len(changes) < maxChanges; {
			next, ok := core.NextPolicyChange(ps, cur, end)
			if !ok {
				break
			}
			changes = append(changes, change{next, ns,
				listOrNone(policyNames(core.PoliciesAt(ps, cur))), listOrNone(policyNames(core.PoliciesAt(ps, next)))})
			cur = next
		}
	}
	sort.SliceStable(changes, func(i, j int) bool { return changes[i].at.Before(changes[j].at) })
	for _, c := range changes {
		fmt.Fprintf(w, "  %s  %s: in force %s (was %s)\n", stamp(c.at), c.ns, c.after, c.before)
	}
	switch {
	case len(changes) == 0:
		fmt.Fprintln(w, "  none")
	case len(changes) >= maxChanges:
		fmt.Fprintf(w, "  ... (stopped after %d changes; shorten --for)\n", maxChanges)
	}
}

// maxChanges bounds the list --for prints.
const maxChanges = 10000

func policyNames(ps []core.Policy) []string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = p.Name
	}
	return out
}

func listOrNone(names []string) string {
	if len(names) == 0 {
		return "none"
	}
	return strings.Join(names, ", ")
}
