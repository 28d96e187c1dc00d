package plan

import (
	"fmt"
	"reflect"
	"sort"
	"strconv"
	"strings"

	"github.com/quartermaster-dev/quartermaster/scenarios"
)

// Vary is the scenario field a plan varies and the integer range it
// searches.
type Vary struct {
	// Path addresses the field as the scenario file spells it, list
	// entries by name: clusters.on-prem.nodes.count,
	// workload.matchmaker.rate.constant. fleets.NAME is short for
	// clusters.C.fleets.NAME when exactly one cluster has a fleet NAME.
	Path     string
	From, To int
}

// ParseVary reads PATH=FROM..TO.
func ParseVary(s string) (Vary, error) {
	path, rng, ok := strings.Cut(s, "=")
	path = strings.TrimSpace(path)
	if !ok || path == "" {
		return Vary{}, fmt.Errorf("%q: want PATH=FROM..TO, like fleets.game.buffer.size=0..500", s)
	}
	from, to, ok := strings.Cut(rng, "..")
	if !ok {
		return Vary{}, fmt.Errorf("%q: range %q: want FROM..TO, like 0..500", s, rng)
	}
	f, err1 := strconv.Atoi(strings.TrimSpace(from))
	t, err2 := strconv.Atoi(strings.TrimSpace(to))
	if err1 != nil || err2 != nil {
		return Vary{}, fmt.Errorf("%q: range %q: FROM and TO must be whole numbers", s, rng)
	}
	if f < 0 || t <= f {
		return Vary{}, fmt.Errorf("%q: range %d..%d: want 0 <= FROM < TO", s, f, t)
	}
	return Vary{Path: path, From: f, To: t}, nil
}

// Set puts v into the field p names in sc. It reports a path that names
// nothing (saying what there is instead) or a field that is not a number.
func (p Vary) Set(sc *scenarios.Scenario, v int) error {
	segs := strings.Split(p.Path, ".")
	for _, s := range segs {
		if s == "" {
			return fmt.Errorf("%q: empty part in the path", p.Path)
		}
	}
	cur := reflect.ValueOf(&sc.Spec).Elem()
	where := "spec"
	if segs[0] == "fleets" {
		if len(segs) < 2 {
			return fmt.Errorf("%q: fleets needs a fleet name, like fleets.game.replicas", p.Path)
		}
		var in []string
		for i := range sc.Spec.Clusters {
			for _, f := range sc.Spec.Clusters[i].Fleets {
				if f.Name == segs[1] {
					in = append(in, sc.Spec.Clusters[i].Name)
				}
			}
		}
		switch len(in) {
		case 0:
			return fmt.Errorf("%q: no cluster has a fleet %q (fleets: %s)", p.Path, segs[1], fleetNames(sc))
		case 1:
			segs = append([]string{"clusters", in[0]}, segs...)
		default:
			return fmt.Errorf("%q: clusters %s each have a fleet %q: say which, like clusters.%s.%s",
				p.Path, strings.Join(in, ", "), segs[1], in[0], p.Path)
		}
	}
	for i := 0; i < len(segs); i++ {
		seg := segs[i]
		if cur.Kind() == reflect.Pointer {
			if cur.IsNil() {
				if cur.Type().Elem().Kind() != reflect.Struct {
					cur.Set(reflect.New(cur.Type().Elem()))
				} else {
					return fmt.Errorf("%q: %s is not set in the scenario, so it has nothing to vary", p.Path, where)
				}
			}
			cur = cur.Elem()
		}
		switch cur.Kind() {
		case reflect.Struct:
			f, ok := fieldByTag(cur, seg)
			if !ok {
				return fmt.Errorf("%q: %s has no %q (it has %s)", p.Path, where, seg, strings.Join(tags(cur.Type()), ", "))
			}
			cur = f
		case reflect.Slice:
			el, names := byName(cur, seg)
			if !el.IsValid() {
				return fmt.Errorf("%q: %s has no entry named %q (there is %s)", p.Path, where, seg, strings.Join(names, ", "))
			}
			cur = el
		default:
			return fmt.Errorf("%q: %s is a number; nothing is below it", p.Path, where)
		}
		where += "." + seg
	}
	if cur.Kind() == reflect.Pointer {
		if cur.IsNil() {
			if cur.Type().Elem().Kind() == reflect.Struct {
				return fmt.Errorf("%q: %s is not set in the scenario, so it has nothing to vary", p.Path, where)
			}
			cur.Set(reflect.New(cur.Type().Elem()))
		}
		cur = cur.Elem()
	}
	switch cur.Kind() {
	case reflect.Int, reflect.Int32, reflect.Int64:
		if cur.Type() == reflect.TypeOf(scenarios.Duration(0)) {
			return fmt.Errorf("%q: %s is a duration; vary a count or a rate", p.Path, where)
		}
		cur.SetInt(int64(v))
	case reflect.Uint64:
		cur.SetUint(uint64(v))
	case reflect.Float64:
		cur.SetFloat(float64(v))
	case reflect.Struct:
		return fmt.Errorf("%q: %s has fields (%s), not a value: name one", p.Path, where, strings.Join(tags(cur.Type()), ", "))
	default:
		return fmt.Errorf("%q: %s is not a number", p.Path, where)
	}
	return nil
}

// fieldByTag finds the struct field whose yaml name is name.
func fieldByTag(v reflect.Value, name string) (reflect.Value, bool) {
	t := v.Type()
	for i := range t.NumField() {
		if yamlName(t.Field(i)) == name {
			return v.Field(i), true
		}
	}
	return reflect.Value{}, false
}

func yamlName(f reflect.StructField) string {
	n, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
	return n
}

func tags(t reflect.Type) []string {
	var out []string
	for i := range t.NumField() {
		if n := yamlName(t.Field(i)); n != "" && n != "-" {
			out = append(out, n)
		}
	}
	sort.Strings(out)
	return out
}

// byName finds the element of a slice of named structs whose Name is
// name; the names there are, when it is not found.
func byName(s reflect.Value, name string) (reflect.Value, []string) {
	var names []string
	for i := range s.Len() {
		el := s.Index(i)
		if el.Kind() != reflect.Struct {
			return reflect.Value{}, nil
		}
		n := el.FieldByName("Name")
		if !n.IsValid() || n.Kind() != reflect.String {
			return reflect.Value{}, nil
		}
		if n.String() == name {
			return el, nil
		}
		names = append(names, n.String())
	}
	if len(names) == 0 {
		names = []string{"nothing"}
	}
	return reflect.Value{}, names
}

func fleetNames(sc *scenarios.Scenario) string {
	var out []string
	for _, c := range sc.Spec.Clusters {
		for _, f := range c.Fleets {
			out = append(out, c.Name+"/"+f.Name)
		}
	}
	if len(out) == 0 {
		return "none"
	}
	return strings.Join(out, ", ")
}
