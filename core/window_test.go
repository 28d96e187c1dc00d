package core

import (
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	// The zone database, so that these tests pass on machines without
	// /usr/share/zoneinfo (minimal containers).
	_ "time/tzdata"
)

func utc(s string) time.Time {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		panic(err)
	}
	return t
}

func mustWindow(t *testing.T, from, until, during, except string) Window {
	t.Helper()
	w, err := ParseWindow(from, until, during, except)
	if err != nil {
		t.Fatalf("ParseWindow: %v", err)
	}
	return w
}

func TestParseRecurrenceRoundTrip(t *testing.T) {
	for in, want := range map[string]string{
		"weekdays 18:00-23:00 Europe/Paris":  "weekdays 18:00-23:00 Europe/Paris",
		"  Mon-Fri   18:00-23:00  UTC ":      "weekdays 18:00-23:00 UTC",
		"sat,sun 0:00-24:00 UTC":             "weekends 00:00-24:00 UTC",
		"fri-mon 22:00-02:00 UTC":            "mon,fri,sat,sun 22:00-02:00 UTC",
		"sunday,wed 22:00-00:00 UTC":         "wed,sun 22:00-24:00 UTC",
		"daily 09:30-17:45 America/New_York": "daily 09:30-17:45 America/New_York",
		"mon-sun 01:00-02:00 Asia/Tokyo":     "daily 01:00-02:00 Asia/Tokyo",
	} {
		r, err := ParseRecurrence(in)
		if err != nil {
			t.Errorf("ParseRecurrence(%q): %v", in, err)
			continue
		}
		if r.String() != want {
			t.Errorf("ParseRecurrence(%q) = %q, want %q", in, r.String(), want)
		}
		again, err := ParseRecurrence(r.String())
		if err != nil || again.String() != r.String() || again.days != r.days || again.start != r.start || again.end != r.end {
			t.Errorf("%q does not read back as itself: %v %v", r.String(), again, err)
		}
	}
}

func TestParseRecurrenceRefusals(t *testing.T) {
	for in, want := range map[string]string{
		"":                                "want \"DAYS HH:MM-HH:MM ZONE\"",
		"weekdays 18:00-23:00":            "want \"DAYS HH:MM-HH:MM ZONE\"",
		"weekdays 18:00 - 23:00 UTC":      "want \"DAYS HH:MM-HH:MM ZONE\"",
		"workdays 18:00-23:00 UTC":        `"workdays" is not a day`,
		"mon-fry 18:00-23:00 UTC":         `"fry" is not a day`,
		"daily 18:00 UTC":                 "not HH:MM-HH:MM",
		"daily 18-23:00 UTC":              `start: "18" is not HH:MM`,
		"daily 18:00-25:00 UTC":           `end: "25:00" is not a time of day`,
		"daily 18:60-23:00 UTC":           `"18:60" is not a time of day`,
		"daily 24:00-02:00 UTC":           "24:00 is the end of a day",
		"daily 18:00-18:00 UTC":           "00:00-24:00",
		"daily 18:00-23:00 Europe/Pariss": `unknown time zone "Europe/Pariss"`,
		"daily 18:00-23:00 Local":         "depends on the machine",
	} {
		_, err := ParseRecurrence(in)
		if err == nil {
			t.Errorf("ParseRecurrence(%q) accepted it", in)
			continue
		}
		if !strings.Contains(err.Error(), want) {
			t.Errorf("ParseRecurrence(%q) = %q, want it to say %q", in, err, want)
		}
	}
	_, err := ParseRecurrences("daily 18:00-23:00 UTC; nope")
	if err == nil || !strings.Contains(err.Error(), "recurrence 2") {
		t.Errorf("ParseRecurrences with a bad second part: %v", err)
	}
}

func TestParseWindowRefusals(t *testing.T) {
	for _, tc := range []struct {
		from, until, during, except string
		want                        []string
	}{
		{from: "2026-11-23 18:00", want: []string{"from:", "RFC 3339"}},
		{until: "2026-11-23T18:00:00", want: []string{"until:", "with an offset"}},
		{from: "2026-11-23T18:00:00Z", until: "2026-11-23T18:00:00Z", want: []string{"must be after from"}},
		{from: "2026-11-23T19:00:00+01:00", until: "2026-11-23T18:00:00Z", want: []string{"must be after from"}},
		{during: "weekdays 18:00-23:00", except: "x", want: []string{"during:", "except:"}},
	} {
		_, err := ParseWindow(tc.from, tc.until, tc.during, tc.except)
		if err == nil {
			t.Errorf("ParseWindow(%+v) accepted it", tc)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("ParseWindow(%+v) = %q, want it to say %q", tc, err, w)
			}
		}
	}
}

func TestWindowOpen(t *testing.T) {
	for _, tc := range []struct {
		name   string
		w      Window
		open   []string
		closed []string
	}{
		{"zero window is always open", Window{}, []string{"0001-01-01T00:00:00Z", "2026-11-23T12:00:00Z"}, nil},
		{"from is included, until is not",
			mustWindow(t, "2026-11-23T18:00:00+01:00", "2026-11-23T23:00:00+01:00", "", ""),
			[]string{"2026-11-23T17:00:00Z", "2026-11-23T21:59:59.999999999Z"},
			[]string{"2026-11-23T16:59:59.999999999Z", "2026-11-23T22:00:00Z"}},
		{"only from", mustWindow(t, "2026-11-23T18:00:00Z", "", "", ""),
			[]string{"2026-11-23T18:00:00Z", "2126-01-01T00:00:00Z"}, []string{"2026-11-23T17:59:59Z"}},
		{"only until", mustWindow(t, "", "2026-11-23T18:00:00Z", "", ""),
			[]string{"1970-01-01T00:00:00Z", "2026-11-23T17:59:59Z"}, []string{"2026-11-23T18:00:00Z"}},
		{"recurrence start included, end excluded (Paris in winter is UTC+1)",
			mustWindow(t, "", "", "weekdays 18:00-23:00 Europe/Paris", ""),
			[]string{"2026-11-23T17:00:00Z", "2026-11-27T21:59:59Z"},                          // Monday 18:00, Friday 22:59:59
			[]string{"2026-11-23T16:59:59Z", "2026-11-23T22:00:00Z", "2026-11-28T17:00:00Z"}}, // Saturday
		{"the same wall-clock hours in summer are an hour earlier in UTC",
			mustWindow(t, "", "", "weekdays 18:00-23:00 Europe/Paris", ""),
			[]string{"2026-06-15T16:00:00Z", "2026-06-15T20:59:00Z"},
			[]string{"2026-06-15T15:59:59Z", "2026-06-15T21:00:00Z"}},
		{"a zone west of UTC: New York's Monday evening is Tuesday in UTC",
			mustWindow(t, "", "", "mon 20:00-23:00 America/New_York", ""),
			[]string{"2026-11-24T01:00:00Z", "2026-11-24T03:59:00Z"},
			[]string{"2026-11-23T20:00:00Z", "2026-11-24T04:00:00Z", "2026-11-25T01:00:00Z"}},
		{"across midnight: Friday 22:00 to Saturday 02:00",
			mustWindow(t, "", "", "fri 22:00-02:00 UTC", ""),
			[]string{"2026-11-27T22:00:00Z", "2026-11-27T23:59:59Z", "2026-11-28T00:00:00Z", "2026-11-28T01:59:59Z"},
			[]string{"2026-11-27T21:59:59Z", "2026-11-28T02:00:00Z", "2026-11-28T22:30:00Z", "2026-11-27T01:00:00Z"}},
		{"across midnight from Sunday into Monday",
			mustWindow(t, "", "", "sun 22:00-02:00 UTC", ""),
			[]string{"2026-11-29T23:00:00Z", "2026-11-30T01:00:00Z"},
			[]string{"2026-11-29T01:00:00Z", "2026-11-30T23:00:00Z"}},
		{"ending at midnight", mustWindow(t, "", "", "mon 22:00-00:00 UTC", ""),
			[]string{"2026-11-23T23:59:59Z"}, []string{"2026-11-24T00:00:00Z", "2026-11-23T21:59:00Z"}},
		{"a wrapping day range", mustWindow(t, "", "", "fri-mon 00:00-24:00 UTC", ""),
			[]string{"2026-11-27T12:00:00Z", "2026-11-29T12:00:00Z", "2026-11-30T12:00:00Z"},
			[]string{"2026-11-24T12:00:00Z", "2026-11-26T23:59:59Z"}},
		{"overlapping recurrences are their union",
			mustWindow(t, "", "", "daily 10:00-14:00 UTC; daily 12:00-16:00 UTC", ""),
			[]string{"2026-11-23T10:00:00Z", "2026-11-23T13:00:00Z", "2026-11-23T15:59:00Z"},
			[]string{"2026-11-23T09:59:00Z", "2026-11-23T16:00:00Z"}},
		{"except cuts into during",
			mustWindow(t, "", "", "daily 10:00-16:00 UTC", "daily 12:00-13:00 UTC; sat,sun 00:00-24:00 UTC"),
			[]string{"2026-11-23T11:59:59Z", "2026-11-23T13:00:00Z"},
			[]string{"2026-11-23T12:00:00Z", "2026-11-23T12:59:59Z", "2026-11-28T11:00:00Z"}},
		{"except alone: always, but not during the evening",
			mustWindow(t, "", "", "", "daily 18:00-23:00 UTC"),
			[]string{"2026-11-23T17:59:59Z", "2026-11-23T23:00:00Z"},
			[]string{"2026-11-23T18:00:00Z"}},
		{"from and until bound a recurrence",
			mustWindow(t, "2026-11-24T00:00:00Z", "2026-11-26T00:00:00Z", "daily 18:00-23:00 UTC", ""),
			[]string{"2026-11-24T18:00:00Z", "2026-11-25T18:00:00Z"},
			[]string{"2026-11-23T18:00:00Z", "2026-11-26T18:00:00Z"}},
		// Paris, 2026-03-29: at 01:00Z the clocks go from 02:00 CET to
		// 03:00 CEST.
		{"spring forward: a window spanning the change is an hour shorter",
			mustWindow(t, "", "", "sun 01:00-04:00 Europe/Paris", ""),
			[]string{"2026-03-29T00:00:00Z", "2026-03-29T00:59:59Z", "2026-03-29T01:00:00Z", "2026-03-29T01:59:59Z"},
			[]string{"2026-03-28T23:59:59Z", "2026-03-29T02:00:00Z"}},
		{"spring forward: a start the clocks skip opens when they land past it",
			mustWindow(t, "", "", "sun 02:30-03:30 Europe/Paris", ""),
			[]string{"2026-03-29T01:00:00Z", "2026-03-29T01:29:59Z"},
			[]string{"2026-03-29T00:59:59Z", "2026-03-29T01:30:00Z", "2026-03-29T00:30:00Z"}},
		// Paris, 2026-10-25: at 01:00Z the clocks go from 03:00 CEST back
		// to 02:00 CET.
		{"fall back: a window spanning the change is an hour longer",
			mustWindow(t, "", "", "sun 01:00-04:00 Europe/Paris", ""),
			[]string{"2026-10-24T23:00:00Z", "2026-10-25T01:30:00Z", "2026-10-25T02:59:59Z"},
			[]string{"2026-10-24T22:59:59Z", "2026-10-25T03:00:00Z"}},
		{"fall back: the repeated hour is open both times",
			mustWindow(t, "", "", "sun 02:00-03:00 Europe/Paris", ""),
			[]string{"2026-10-25T00:00:00Z", "2026-10-25T00:59:59Z", "2026-10-25T01:00:00Z", "2026-10-25T01:59:59Z"},
			[]string{"2026-10-24T23:59:59Z", "2026-10-25T02:00:00Z"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, s := range tc.open {
				if !tc.w.Open(utc(s)) {
					t.Errorf("%s: closed at %s, want open", tc.w, s)
				}
			}
			for _, s := range tc.closed {
				if tc.w.Open(utc(s)) {
					t.Errorf("%s: open at %s, want closed", tc.w, s)
				}
			}
		})
	}
}

func TestWindowNextChange(t *testing.T) {
	for _, tc := range []struct {
		name      string
		w         Window
		at, limit string
		want      string // "" for none
	}{
		{"opens at from", mustWindow(t, "2026-11-23T18:00:00Z", "2026-11-23T19:00:00Z", "", ""),
			"2026-11-23T12:00:00Z", "2026-12-01T00:00:00Z", "2026-11-23T18:00:00Z"},
		{"closes at until", mustWindow(t, "2026-11-23T18:00:00Z", "2026-11-23T19:00:00Z", "", ""),
			"2026-11-23T18:00:00Z", "2026-12-01T00:00:00Z", "2026-11-23T19:00:00Z"},
		{"nothing after until", mustWindow(t, "2026-11-23T18:00:00Z", "2026-11-23T19:00:00Z", "daily 10:00-11:00 UTC", ""),
			"2026-11-23T19:00:00Z", "2027-12-01T00:00:00Z", ""},
		{"not past the limit", mustWindow(t, "2026-11-23T18:00:00Z", "", "", ""),
			"2026-11-23T12:00:00Z", "2026-11-23T17:59:59Z", ""},
		{"the zero window never changes", Window{}, "2026-11-23T12:00:00Z", "2030-01-01T00:00:00Z", ""},
		{"Friday evening to Monday evening skips the weekend",
			mustWindow(t, "", "", "weekdays 18:00-23:00 Europe/Paris", ""),
			"2026-11-27T22:00:00Z", "2026-12-31T00:00:00Z", "2026-11-30T17:00:00Z"},
		{"an overnight window closes the next morning",
			mustWindow(t, "", "", "fri 22:00-02:00 UTC", ""),
			"2026-11-27T23:00:00Z", "2026-12-31T00:00:00Z", "2026-11-28T02:00:00Z"},
		{"contiguous recurrences close once", // 10-14 and 14-16: one stretch
			mustWindow(t, "", "", "daily 10:00-14:00 UTC; daily 14:00-16:00 UTC", ""),
			"2026-11-23T11:00:00Z", "2026-12-31T00:00:00Z", "2026-11-23T16:00:00Z"},
		{"spring forward closes a 01:00-04:00 window at 02:00Z",
			mustWindow(t, "", "", "sun 01:00-04:00 Europe/Paris", ""),
			"2026-03-29T00:30:00Z", "2026-04-30T00:00:00Z", "2026-03-29T02:00:00Z"},
		{"spring forward opens a skipped start at the change",
			mustWindow(t, "", "", "sun 02:30-03:30 Europe/Paris", ""),
			"2026-03-28T12:00:00Z", "2026-04-30T00:00:00Z", "2026-03-29T01:00:00Z"},
		{"fall back: the repeated hour is one stretch",
			mustWindow(t, "", "", "sun 02:00-03:00 Europe/Paris", ""),
			"2026-10-25T00:30:00Z", "2026-11-30T00:00:00Z", "2026-10-25T02:00:00Z"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := tc.w.NextChange(utc(tc.at), utc(tc.limit))
			switch {
			case tc.want == "" && ok:
				t.Errorf("NextChange = %s, want none", got.Format(time.RFC3339))
			case tc.want != "" && (!ok || !got.Equal(utc(tc.want))):
				t.Errorf("NextChange = %s %v, want %s", got.Format(time.RFC3339), ok, tc.want)
			}
		})
	}
}

// TestNextChangeAgainstScan checks NextChange against the obvious way:
// asking Open minute by minute. Random windows in zones with clock changes,
// around the changes of 2026.
func TestNextChangeAgainstScan(t *testing.T) {
	zones := []string{"Europe/Paris", "America/New_York", "Australia/Sydney", "Asia/Kolkata", "UTC"}
	days := []string{"daily", "weekdays", "weekends", "mon", "fri-sun", "tue,thu", "sun"}
	bases := []time.Time{utc("2026-03-07T00:00:00Z"), utc("2026-03-27T00:00:00Z"), utc("2026-10-23T00:00:00Z"),
		utc("2026-10-31T00:00:00Z"), utc("2026-04-03T00:00:00Z")}
	rng := rand.New(rand.NewPCG(1, 2))
	hhmm := func() string {
		m := rng.IntN(48) * 30
		return formatMinute(m)
	}
	rec := func() string {
		s, e := hhmm(), hhmm()
		for e == s {
			e = hhmm()
		}
		return days[rng.IntN(len(days))] + " " + s + "-" + e + " " + zones[rng.IntN(len(zones))]
	}
	for i := range 200 {
		base := bases[rng.IntN(len(bases))]
		var during, except []string
		for range rng.IntN(3) {
			during = append(during, rec())
		}
		for range rng.IntN(2) {
			except = append(except, rec())
		}
		var from, until string
		if rng.IntN(3) == 0 {
			from = base.Add(time.Duration(rng.IntN(4*24*60)) * time.Minute).Format(time.RFC3339)
		}
		if rng.IntN(3) == 0 {
			until = base.Add(time.Duration(4*24*60+rng.IntN(4*24*60)) * time.Minute).Format(time.RFC3339)
		}
		w := mustWindow(t, from, until, strings.Join(during, "; "), strings.Join(except, "; "))
		at := base.Add(time.Duration(rng.Int64N(int64(3 * 24 * time.Hour))))
		limit := at.Add(8 * 24 * time.Hour)

		want, wantOK := time.Time{}, false
		state := w.Open(at)
		for m := at.Truncate(time.Minute).Add(time.Minute); !m.After(limit); m = m.Add(time.Minute) {
			if w.Open(m) != state {
				want, wantOK = m, true
				break
			}
		}
		got, ok := w.NextChange(at, limit)
		if ok != wantOK || !got.Equal(want) {
			t.Fatalf("case %d: %s at %s: NextChange = %s %v, scan says %s %v",
				i, w, at.Format(time.RFC3339Nano), got.Format(time.RFC3339), ok, want.Format(time.RFC3339), wantOK)
		}
	}
}

func TestPoliciesAt(t *testing.T) {
	evening := mustWindow(t, "", "", "weekdays 18:00-23:00 Europe/Paris", "")
	maintenance := mustWindow(t, "2026-11-24T20:00:00Z", "2026-11-24T22:00:00Z", "", "")
	ps := []Policy{
		{Name: "onprem", Priority: 1, Weight: 1, Connection: ConnectionInfo{ClusterName: "onprem"}},
		{Name: "cloud-evening", Priority: 2, Weight: 1, Window: &evening, Connection: ConnectionInfo{ClusterName: "cloud"}},
		{Name: "cloud-maintenance", Priority: 0, Weight: 1, Window: &maintenance, Connection: ConnectionInfo{ClusterName: "cloud"}},
	}
	names := func(ps []Policy) string {
		var n []string
		for _, p := range ps {
			n = append(n, p.Name)
		}
		return strings.Join(n, ",")
	}
	for at, want := range map[string]string{
		"2026-11-24T12:00:00Z": "onprem",
		"2026-11-24T17:00:00Z": "onprem,cloud-evening",
		// Both cloud policies overlap: each is in force, and the cluster
		// is tried once, in the first tier that names it.
		"2026-11-24T21:00:00Z": "onprem,cloud-evening,cloud-maintenance",
		"2026-11-28T21:00:00Z": "onprem",
	} {
		got := PoliciesAt(ps, utc(at))
		if names(got) != want {
			t.Errorf("at %s: %s, want %s", at, names(got), want)
		}
		if at == "2026-11-24T21:00:00Z" {
			order := OrderClusters(got, 1)
			if names(order) != "cloud-maintenance,onprem" {
				t.Errorf("overlap order: %s, want cloud-maintenance,onprem", names(order))
			}
		}
	}
	if got := PoliciesAt(ps[:1], utc("2026-11-24T12:00:00Z")); &got[0] != &ps[0] {
		t.Error("PoliciesAt copied a set that is wholly in force")
	}
	next, ok := NextPolicyChange(ps, utc("2026-11-24T12:00:00Z"), utc("2026-12-31T00:00:00Z"))
	if !ok || !next.Equal(utc("2026-11-24T17:00:00Z")) {
		t.Errorf("NextPolicyChange = %s %v, want 2026-11-24T17:00:00Z", next, ok)
	}
	next, ok = NextPolicyChange(ps, utc("2026-11-24T17:00:00Z"), utc("2026-12-31T00:00:00Z"))
	if !ok || !next.Equal(utc("2026-11-24T20:00:00Z")) {
		t.Errorf("NextPolicyChange = %s %v, want the maintenance's start", next, ok)
	}
	if _, ok := NextPolicyChange(ps[:1], utc("2026-11-24T17:00:00Z"), utc("2036-12-31T00:00:00Z")); ok {
		t.Error("a policy without a window changed")
	}
	// A policy without a window has a nil one: always open, never changing.
	if w := ps[0].Window; w != nil || !w.Open(time.Time{}) || !w.IsZero() || w.String() != "always" || w.Validate() != nil {
		t.Errorf("nil window: %v %v %v %q", w, w.Open(time.Time{}), w.IsZero(), w.String())
	}
}

// FuzzParseWindow: any text is read or refused, never a panic; what is read
// writes back as text that reads as the same window, and NextChange moves
// forward.
func FuzzParseWindow(f *testing.F) {
	f.Add("2026-11-23T18:00:00+01:00", "", "weekdays 18:00-23:00 Europe/Paris", "fri 22:00-02:00 UTC")
	f.Add("", "2026-11-23T18:00:00Z", "sat-mon 0:00-24:00 America/New_York; daily 12:00-13:00 UTC", "")
	f.Add("", "", "mon,wed 23:59-00:01 Asia/Kolkata", "")
	f.Fuzz(func(t *testing.T, from, until, during, except string) {
		w, err := ParseWindow(from, until, during, except)
		if err != nil {
			return
		}
		fw := func(t time.Time) string {
			if t.IsZero() {
				return ""
			}
			return t.Format(time.RFC3339Nano)
		}
		again, err := ParseWindow(fw(w.From), fw(w.Until), FormatRecurrences(w.During), FormatRecurrences(w.Except))
		if err != nil || again.String() != w.String() {
			t.Fatalf("%s does not read back: %s, %v", w, again, err)
		}
		at := time.Date(2026, 3, 28, 12, 0, 0, 0, time.UTC)
		if next, ok := w.NextChange(at, at.Add(10*24*time.Hour)); ok && !next.After(at) {
			t.Fatalf("%s: NextChange(%s) = %s, not after it", w, at, next)
		}
	})
}
