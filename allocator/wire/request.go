package wire

import (
	"strconv"

	"github.com/quartermaster-dev/quartermaster/allocator/pb/allocation"
	"github.com/quartermaster-dev/quartermaster/core"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// errs collects field errors during a conversion, so that one reply tells
// the caller everything that is wrong rather than the first thing.
type errs struct{ list []core.FieldError }

func (e *errs) add(field, reason string) {
	e.list = append(e.list, core.FieldError{Field: field, Reason: reason})
}

// err returns the collected errors as the core's error type, which the
// service already maps to InvalidArgument / HTTP 400. Sorting keeps the
// message stable although maps iterate in random order.
func (e *errs) err() error {
	if len(e.list) == 0 {
		return nil
	}
	sortFieldErrors(e.list)
	return &core.InvalidRequestError{Errors: e.list}
}

// RequestToCore converts an Agones AllocationRequest into the core's
// Request.
//
// It keeps the request's shape: the deprecated required/preferred selectors
// stay in Required/Preferred for core.Normalize to order, and the namespace
// stays empty when it was. metadata (field 7) wins over the deprecated
// metaPatch (field 6) whenever it is present, even when empty, as Agones
// documents. Unset wrappers stay nil. An enum number outside its declared
// values (possible on the wire and in JSON) is an error naming the field,
// never a silent default. A nil request, or nil messages inside it, read as
// empty messages, as proto3 defines them.
//
// The error, if any, is a *core.InvalidRequestError. Semantic checks
// (label syntax, negative amounts, unknown counter actions) are left to
// core.Normalize.
func RequestToCore(in *allocation.AllocationRequest) (core.Request, error) {
	var e errs
	out := core.Request{Namespace: in.GetNamespace()}

	if mc := in.GetMultiClusterSetting(); mc != nil {
		out.MultiCluster = core.MultiClusterSetting{
			Enabled:        mc.GetEnabled(),
			PolicySelector: copyStrings(mc.GetPolicySelector().GetMatchLabels()),
		}
	}

	//nolint:staticcheck // SA1019: the deprecated field is still part of the API and must be honoured.
	if r := in.GetRequiredGameServerSelector(); r != nil {
		s := selectorToCore(&e, "requiredGameServerSelector", r)
		out.Required = &s
	}
	//nolint:staticcheck // SA1019: as above.
	if ps := in.GetPreferredGameServerSelectors(); len(ps) > 0 {
		out.Preferred = make([]core.Selector, len(ps))
		for i, p := range ps {
			out.Preferred[i] = selectorToCore(&e, "preferredGameServerSelectors["+strconv.Itoa(i)+"]", p)
		}
	}
	if ss := in.GetGameServerSelectors(); len(ss) > 0 {
		out.Selectors = make([]core.Selector, len(ss))
		for i, s := range ss {
			out.Selectors[i] = selectorToCore(&e, "gameServerSelectors["+strconv.Itoa(i)+"]", s)
		}
	}

	switch v := in.GetScheduling(); v {
	case allocation.AllocationRequest_Packed:
		out.Scheduling = core.Packed
	case allocation.AllocationRequest_Distributed:
		out.Scheduling = core.Distributed
	default:
		e.add("scheduling", unknownEnum(int32(v), "Packed or Distributed"))
	}

	meta := in.GetMetadata()
	if meta == nil {
		meta = in.GetMetaPatch() //nolint:staticcheck // SA1019: honoured only when metadata is absent.
	}
	out.Metadata = core.MetaPatch{
		Labels:      copyStrings(meta.GetLabels()),
		Annotations: copyStrings(meta.GetAnnotations()),
	}

	if ps := in.GetPriorities(); len(ps) > 0 {
		out.Priorities = make([]core.Priority, len(ps))
		for i, p := range ps {
			out.Priorities[i] = priorityToCore(&e, "priorities["+strconv.Itoa(i)+"]", p)
		}
	}

	if cs := in.GetCounters(); len(cs) > 0 {
		out.Counters = make(map[string]core.CounterAction, len(cs))
		for k, a := range cs {
			ca := core.CounterAction{
				Amount:   int64Ptr(a.GetAmount()),
				Capacity: int64Ptr(a.GetCapacity()),
			}
			if a.GetAction() != nil {
				ca.Action = a.GetAction().GetValue()
			}
			out.Counters[k] = ca
		}
	}
	if ls := in.GetLists(); len(ls) > 0 {
		out.Lists = make(map[string]core.ListAction, len(ls))
		for k, a := range ls {
			out.Lists[k] = core.ListAction{
				AddValues:    copySlice(a.GetAddValues()),
				DeleteValues: copySlice(a.GetDeleteValues()),
				Capacity:     int64Ptr(a.GetCapacity()),
			}
		}
	}

	if err := e.err(); err != nil {
		return core.Request{}, err
	}
	return out, nil
}

func selectorToCore(e *errs, field string, in *allocation.GameServerSelector) core.Selector {
	out := core.Selector{MatchLabels: copyStrings(in.GetMatchLabels())}
	switch v := in.GetGameServerState(); v {
	case allocation.GameServerSelector_READY:
		out.State = core.StateReady
	case allocation.GameServerSelector_ALLOCATED:
		out.State = core.StateAllocated
	default:
		e.add(field+".gameServerState", unknownEnum(int32(v), "READY or ALLOCATED"))
	}
	if xs := in.GetMatchExpressions(); len(xs) > 0 {
		out.MatchExpressions = make([]core.LabelExpression, len(xs))
		for i, x := range xs {
			le := core.LabelExpression{Key: x.GetKey(), Values: copySlice(x.GetValues())}
			switch v := x.GetOperator(); v {
			case allocation.LabelMatchExpressions_In:
				le.Operator = core.OpIn
			case allocation.LabelMatchExpressions_NotIn:
				le.Operator = core.OpNotIn
			case allocation.LabelMatchExpressions_Exists:
				le.Operator = core.OpExists
			case allocation.LabelMatchExpressions_DoesNotExist:
				le.Operator = core.OpDoesNotExist
			default:
				e.add(field+".matchExpressions["+strconv.Itoa(i)+"].operator",
					unknownEnum(int32(v), "In, NotIn, Exists or DoesNotExist"))
			}
			out.MatchExpressions[i] = le
		}
	}
	if cs := in.GetCounters(); len(cs) > 0 {
		out.Counters = make(map[string]core.CounterSelector, len(cs))
		for k, c := range cs {
			out.Counters[k] = core.CounterSelector{
				MinCount:     c.GetMinCount(),
				MaxCount:     c.GetMaxCount(),
				MinAvailable: c.GetMinAvailable(),
				MaxAvailable: c.GetMaxAvailable(),
			}
		}
	}
	if ls := in.GetLists(); len(ls) > 0 {
		out.Lists = make(map[string]core.ListSelector, len(ls))
		for k, l := range ls {
			out.Lists[k] = core.ListSelector{
				ContainsValue: l.GetContainsValue(),
				MinAvailable:  l.GetMinAvailable(),
				MaxAvailable:  l.GetMaxAvailable(),
			}
		}
	}
	return out
}

func priorityToCore(e *errs, field string, in *allocation.Priority) core.Priority {
	out := core.Priority{Key: in.GetKey()}
	switch v := in.GetType(); v {
	case allocation.Priority_Counter:
		out.Type = core.PriorityCounter
	case allocation.Priority_List:
		out.Type = core.PriorityList
	default:
		e.add(field+".type", unknownEnum(int32(v), "Counter or List"))
	}
	switch v := in.GetOrder(); v {
	case allocation.Priority_Ascending:
		out.Order = core.Ascending
	case allocation.Priority_Descending:
		out.Order = core.Descending
	default:
		e.add(field+".order", unknownEnum(int32(v), "Ascending or Descending"))
	}
	return out
}

// RequestFromCore converts a core Request back into the wire form: what the
// multi-cluster forwarder sends to another cluster's allocator, and what
// Quartermaster's own client sends. It is the inverse of RequestToCore.
//
// Values the wire cannot express (a strategy, state, operator, priority
// type or order the API does not define) are an error naming the field; a
// selector state of "" is sent as READY, the core's default.
func RequestFromCore(in *core.Request) (*allocation.AllocationRequest, error) {
	if in == nil {
		return nil, &core.InvalidRequestError{Errors: []core.FieldError{{Field: "request", Reason: "is missing"}}}
	}
	var e errs
	out := &allocation.AllocationRequest{Namespace: in.Namespace}

	if in.MultiCluster.Enabled || len(in.MultiCluster.PolicySelector) > 0 {
		out.MultiClusterSetting = &allocation.MultiClusterSetting{Enabled: in.MultiCluster.Enabled}
		if len(in.MultiCluster.PolicySelector) > 0 {
			out.MultiClusterSetting.PolicySelector = &allocation.LabelSelector{
				MatchLabels: copyStrings(in.MultiCluster.PolicySelector),
			}
		}
	}
	if in.Required != nil {
		//nolint:staticcheck // SA1019: forwarding must preserve the deprecated form as given.
		out.RequiredGameServerSelector = selectorFromCore(&e, "requiredGameServerSelector", in.Required)
	}
	for i := range in.Preferred {
		//nolint:staticcheck // SA1019: as above.
		out.PreferredGameServerSelectors = append(out.PreferredGameServerSelectors,
			selectorFromCore(&e, "preferredGameServerSelectors["+strconv.Itoa(i)+"]", &in.Preferred[i]))
	}
	for i := range in.Selectors {
		out.GameServerSelectors = append(out.GameServerSelectors,
			selectorFromCore(&e, "gameServerSelectors["+strconv.Itoa(i)+"]", &in.Selectors[i]))
	}

	switch in.Scheduling {
	case core.Packed:
		out.Scheduling = allocation.AllocationRequest_Packed
	case core.Distributed:
		out.Scheduling = allocation.AllocationRequest_Distributed
	default:
		e.add("scheduling", "unknown strategy "+in.Scheduling.String()+" (want Packed or Distributed)")
	}

	if len(in.Metadata.Labels) > 0 || len(in.Metadata.Annotations) > 0 {
		out.Metadata = &allocation.MetaPatch{
			Labels:      copyStrings(in.Metadata.Labels),
			Annotations: copyStrings(in.Metadata.Annotations),
		}
	}

	for i, p := range in.Priorities {
		f := "priorities[" + strconv.Itoa(i) + "]"
		wp := &allocation.Priority{Key: p.Key}
		switch p.Type {
		case core.PriorityCounter:
			wp.Type = allocation.Priority_Counter
		case core.PriorityList:
			wp.Type = allocation.Priority_List
		default:
			e.add(f+".type", "unknown type "+p.Type.String()+" (want Counter or List)")
		}
		switch p.Order {
		case core.Ascending:
			wp.Order = allocation.Priority_Ascending
		case core.Descending:
			wp.Order = allocation.Priority_Descending
		default:
			e.add(f+".order", "unknown order "+p.Order.String()+" (want Ascending or Descending)")
		}
		out.Priorities = append(out.Priorities, wp)
	}

	if len(in.Counters) > 0 {
		out.Counters = make(map[string]*allocation.CounterAction, len(in.Counters))
		for k, a := range in.Counters {
			wa := &allocation.CounterAction{
				Amount:   int64Wrapper(a.Amount),
				Capacity: int64Wrapper(a.Capacity),
			}
			if a.Action != "" {
				wa.Action = wrapperspb.String(a.Action)
			}
			out.Counters[k] = wa
		}
	}
	if len(in.Lists) > 0 {
		out.Lists = make(map[string]*allocation.ListAction, len(in.Lists))
		for k, a := range in.Lists {
			out.Lists[k] = &allocation.ListAction{
				AddValues:    copySlice(a.AddValues),
				DeleteValues: copySlice(a.DeleteValues),
				Capacity:     int64Wrapper(a.Capacity),
			}
		}
	}

	if err := e.err(); err != nil {
		return nil, err
	}
	return out, nil
}

func selectorFromCore(e *errs, field string, in *core.Selector) *allocation.GameServerSelector {
	out := &allocation.GameServerSelector{MatchLabels: copyStrings(in.MatchLabels)}
	switch in.State {
	case "", core.StateReady:
		out.GameServerState = allocation.GameServerSelector_READY
	case core.StateAllocated:
		out.GameServerState = allocation.GameServerSelector_ALLOCATED
	default:
		e.add(field+".gameServerState", "state "+strconv.Quote(string(in.State))+" cannot be allocated from (want Ready or Allocated)")
	}
	for i, x := range in.MatchExpressions {
		wx := &allocation.LabelMatchExpressions{Key: x.Key, Values: copySlice(x.Values)}
		switch x.Operator {
		case core.OpIn:
			wx.Operator = allocation.LabelMatchExpressions_In
		case core.OpNotIn:
			wx.Operator = allocation.LabelMatchExpressions_NotIn
		case core.OpExists:
			wx.Operator = allocation.LabelMatchExpressions_Exists
		case core.OpDoesNotExist:
			wx.Operator = allocation.LabelMatchExpressions_DoesNotExist
		default:
			e.add(field+".matchExpressions["+strconv.Itoa(i)+"].operator",
				"unknown operator "+strconv.Quote(string(x.Operator))+" (want In, NotIn, Exists or DoesNotExist)")
		}
		out.MatchExpressions = append(out.MatchExpressions, wx)
	}
	if len(in.Counters) > 0 {
		out.Counters = make(map[string]*allocation.CounterSelector, len(in.Counters))
		for k, c := range in.Counters {
			out.Counters[k] = &allocation.CounterSelector{
				MinCount:     c.MinCount,
				MaxCount:     c.MaxCount,
				MinAvailable: c.MinAvailable,
				MaxAvailable: c.MaxAvailable,
			}
		}
	}
	if len(in.Lists) > 0 {
		out.Lists = make(map[string]*allocation.ListSelector, len(in.Lists))
		for k, l := range in.Lists {
			out.Lists[k] = &allocation.ListSelector{
				ContainsValue: l.ContainsValue,
				MinAvailable:  l.MinAvailable,
				MaxAvailable:  l.MaxAvailable,
			}
		}
	}
	return out
}

// unknownEnum is the reason given for an enum number the API does not
// define. Open proto3 enums let any int32 through decoding, so this is the
// one place such a value is caught.
func unknownEnum(v int32, want string) string {
	return "unknown value " + strconv.Itoa(int(v)) + " (want " + want + ")"
}
