package trace

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/quartermaster-dev/quartermaster/core"
)

// wireRequest is the part of Agones' AllocationRequest JSON that decides
// where a request can go: namespace, selectors by labels and state,
// scheduling, multi-cluster routing. Counters, lists, priorities and
// metadata are left out: the simulator's servers carry labels only (see
// scenarios' Fleet), so those fields could not change a replayed decision.
type wireRequest struct {
	Namespace    string `json:"namespace"`
	MultiCluster *struct {
		Enabled        bool `json:"enabled"`
		PolicySelector *struct {
			MatchLabels map[string]string `json:"matchLabels"`
		} `json:"policySelector"`
	} `json:"multiClusterSetting"`
	Selectors  []wireSelector  `json:"gameServerSelectors"`
	Required   *wireSelector   `json:"requiredGameServerSelector"`
	Preferred  []wireSelector  `json:"preferredGameServerSelectors"`
	Scheduling json.RawMessage `json:"scheduling"`
}

type wireSelector struct {
	MatchLabels      map[string]string `json:"matchLabels"`
	MatchExpressions []struct {
		Key      string   `json:"key"`
		Operator string   `json:"operator"`
		Values   []string `json:"values"`
	} `json:"matchExpressions"`
	State json.RawMessage `json:"gameServerState"`
}

// CoreRequest is the record's request as the allocation core takes it, as
// far as labels, state, scheduling and routing go (see wireRequest).
func (r *Record) CoreRequest() (core.Request, error) {
	return CoreRequest(r.Request)
}

// CoreRequest converts an AllocationRequest's REST JSON (see
// Record.CoreRequest). Errors name the field.
func CoreRequest(raw json.RawMessage) (core.Request, error) {
	var w wireRequest
	if len(raw) == 0 {
		return core.Request{}, errors.New("request: missing")
	}
	if err := json.Unmarshal(raw, &w); err != nil {
		return core.Request{}, fmt.Errorf("request: %w", err)
	}
	req := core.Request{Namespace: w.Namespace}
	if mc := w.MultiCluster; mc != nil {
		req.MultiCluster.Enabled = mc.Enabled
		if mc.PolicySelector != nil {
			req.MultiCluster.PolicySelector = mc.PolicySelector.MatchLabels
		}
	}
	s, err := enum(w.Scheduling, map[string]int{"Packed": 0, "Distributed": 1}, 1)
	if err != nil {
		return core.Request{}, fmt.Errorf("request.scheduling: %w", err)
	}
	if s == 1 {
		req.Scheduling = core.Distributed
	}
	conv := func(path string, ws *wireSelector) (core.Selector, error) {
		sel := core.Selector{MatchLabels: ws.MatchLabels}
		for _, e := range ws.MatchExpressions {
			sel.MatchExpressions = append(sel.MatchExpressions,
				core.LabelExpression{Key: e.Key, Operator: core.Operator(e.Operator), Values: e.Values})
		}
		st, err := enum(ws.State, map[string]int{"READY": 0, "ALLOCATED": 1}, 1)
		if err != nil {
			return sel, fmt.Errorf("%s.gameServerState: %w", path, err)
		}
		if st == 1 {
			sel.State = core.StateAllocated
		}
		return sel, nil
	}
	for i := range w.Selectors {
		sel, err := conv(fmt.Sprintf("request.gameServerSelectors[%d]", i), &w.Selectors[i])
		if err != nil {
			return core.Request{}, err
		}
		req.Selectors = append(req.Selectors, sel)
	}
	if w.Required != nil {
		sel, err := conv("request.requiredGameServerSelector", w.Required)
		if err != nil {
			return core.Request{}, err
		}
		req.Required = &sel
	}
	for i := range w.Preferred {
		sel, err := conv(fmt.Sprintf("request.preferredGameServerSelectors[%d]", i), &w.Preferred[i])
		if err != nil {
			return core.Request{}, err
		}
		req.Preferred = append(req.Preferred, sel)
	}
	return req, nil
}

// enum reads a proto3 JSON enum: its name or its number (up to maxN).
// Absent or null is 0.
func enum(raw json.RawMessage, names map[string]int, maxN int) (int, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return 0, nil
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		if v, ok := names[s]; ok {
			return v, nil
		}
		return 0, fmt.Errorf("%q is not one of its names", s)
	}
	var n int
	if json.Unmarshal(raw, &n) == nil && n >= 0 && n <= maxN {
		return n, nil
	}
	return 0, fmt.Errorf("%s: want a name or a number 0 to %d", raw, maxN)
}
