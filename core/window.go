package core

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Window is when a policy is in force: between From and Until, and, when
// During is given, only while one of its recurrences is open, and never
// while one of Except's is. The zero Window, and a nil *Window, are always
// open, so a policy without one behaves as Agones' policies do.
//
// Whether a window is open is a function of the instant alone; callers
// pass the instant (the live forwarder its clock, the simulator its
// virtual clock), as everywhere in core.
type Window struct {
	// From is the first instant the window is open; zero: since ever.
	From time.Time
	// Until is the first instant it is closed again; zero: for ever.
	Until time.Time
	// During restricts the window to these recurring times (any of them).
	During []Recurrence
	// Except closes the window while any of these is open.
	Except []Recurrence
}

// IsZero reports whether w sets nothing (and so is always open).
func (w *Window) IsZero() bool {
	return w == nil || w.From.IsZero() && w.Until.IsZero() && len(w.During) == 0 && len(w.Except) == 0
}

// Open reports whether the window is open at t.
func (w *Window) Open(t time.Time) bool {
	if w == nil {
		return true
	}
	if !w.From.IsZero() && t.Before(w.From) {
		return false
	}
	if !w.Until.IsZero() && !t.Before(w.Until) {
		return false
	}
	if len(w.During) > 0 {
		open := false
		for _, r := range w.During {
			if r.Open(t) {
				open = true
				break
			}
		}
		if !open {
			return false
		}
	}
	for _, r := range w.Except {
		if r.Open(t) {
			return false
		}
	}
	return true
}

// Validate checks that the window can ever be open as written.
func (w *Window) Validate() error {
	if w == nil {
		return nil
	}
	if !w.From.IsZero() && !w.Until.IsZero() && !w.Until.After(w.From) {
		return fmt.Errorf("until (%s) must be after from (%s)", w.Until.Format(time.RFC3339), w.From.Format(time.RFC3339))
	}
	for _, rs := range [][]Recurrence{w.During, w.Except} {
		for _, r := range rs {
			if r.loc == nil {
				return errors.New("a recurrence was not made by ParseRecurrence")
			}
		}
	}
	return nil
}

// maxSteps bounds NextChange's walk from boundary to boundary: three
// boundaries a day per recurrence over more than a century. Each step moves
// forward, so the bound only guards against a limit absurdly far away.
const maxSteps = 1 << 20

// NextChange returns the first instant after t, and not after limit, at
// which the window opens or closes; false when it does neither by limit.
func (w *Window) NextChange(t, limit time.Time) (time.Time, bool) {
	if w.IsZero() {
		return time.Time{}, false
	}
	state := w.Open(t)
	cur := t
	for range maxSteps {
		next, ok := w.nextBoundary(cur)
		if !ok || next.After(limit) {
			return time.Time{}, false
		}
		if w.Open(next) != state {
			return next, true
		}
		cur = next
	}
	return time.Time{}, false
}

// nextBoundary is the first instant after t at which some part of w may
// change: From, Until, or a recurrence's boundary.
func (w *Window) nextBoundary(t time.Time) (time.Time, bool) {
	var best time.Time
	take := func(c time.Time) {
		if c.After(t) && (best.IsZero() || c.Before(best)) {
			best = c
		}
	}
	if !w.From.IsZero() {
		take(w.From)
	}
	if !w.Until.IsZero() {
		take(w.Until)
	}
	// Past Until nothing changes any more.
	if w.Until.IsZero() || t.Before(w.Until) {
		for _, rs := range [][]Recurrence{w.During, w.Except} {
			for _, r := range rs {
				take(r.nextBoundary(t))
			}
		}
	}
	return best, !best.IsZero()
}

// String writes the window the way ParseWindow reads its parts, for logs
// and `qm policies`; "always" for the zero Window.
func (w *Window) String() string {
	if w.IsZero() {
		return "always"
	}
	var parts []string
	if !w.From.IsZero() {
		parts = append(parts, "from "+w.From.Format(time.RFC3339))
	}
	if !w.Until.IsZero() {
		parts = append(parts, "until "+w.Until.Format(time.RFC3339))
	}
	if len(w.During) > 0 {
		parts = append(parts, "during "+FormatRecurrences(w.During))
	}
	if len(w.Except) > 0 {
		parts = append(parts, "except "+FormatRecurrences(w.Except))
	}
	return strings.Join(parts, ", ")
}

// ParseWindow builds a Window from its four parts as text: from and until
// as RFC 3339 instants, during and except as recurrences separated by ";"
// (see ParseRecurrence). Empty parts are unset. The error names the part.
func ParseWindow(from, until, during, except string) (Window, error) {
	var w Window
	var errs []string
	var err error
	if from != "" {
		if w.From, err = ParseInstant(from); err != nil {
			errs = append(errs, "from: "+err.Error())
		}
	}
	if until != "" {
		if w.Until, err = ParseInstant(until); err != nil {
			errs = append(errs, "until: "+err.Error())
		}
	}
	if during != "" {
		if w.During, err = ParseRecurrences(during); err != nil {
			errs = append(errs, "during: "+err.Error())
		}
	}
	if except != "" {
		if w.Except, err = ParseRecurrences(except); err != nil {
			errs = append(errs, "except: "+err.Error())
		}
	}
	if len(errs) == 0 {
		if err := w.Validate(); err != nil {
			errs = append(errs, err.Error())
		}
	}
	if len(errs) > 0 {
		return Window{}, errors.New(strings.Join(errs, "; "))
	}
	return w, nil
}

// ParseInstant reads an RFC 3339 instant; the offset (Z or ±hh:mm) is
// required, so that no instant depends on the machine's time zone.
func ParseInstant(s string) (time.Time, error) {
	t, err := time.Parse(time.RFC3339Nano, strings.TrimSpace(s))
	if err != nil {
		return time.Time{}, fmt.Errorf("%q is not an RFC 3339 instant with an offset, like 2026-12-24T18:00:00+01:00 or 2026-12-24T17:00:00Z", s)
	}
	return t, nil
}

// Recurrence is a daily or weekly time of day in a time zone, such as
// "weekdays 18:00-23:00 Europe/Paris". It is open while the wall clock of
// its zone reads a time from its start (included) to its end (excluded)
// on one of its days. An end at or before the start runs past midnight
// into the next day: "fri 22:00-02:00" is open from Friday 22:00 to
// Saturday 02:00.
//
// Reading the wall clock is what an operator means by "18:00 in Paris",
// and it decides what happens on the days the clocks change: a window that
// spans the change lasts an hour less (spring) or more (autumn) in real
// time, and a start the clocks skip opens when the clock reaches a time
// past it. Make from ParseRecurrence; the zero Recurrence is never open.
type Recurrence struct {
	days       uint8 // bit d: opens on time.Weekday(d)
	start, end int   // minutes since local midnight; end in (0, 1440]
	loc        *time.Location
}

// Open reports whether r is open at t.
func (r Recurrence) Open(t time.Time) bool {
	if r.loc == nil {
		return false
	}
	lt := t.In(r.loc)
	m := lt.Hour()*60 + lt.Minute()
	day := lt.Weekday()
	if r.start < r.end {
		return r.on(day) && m >= r.start && m < r.end
	}
	// Past midnight: the evening part today, or the morning part of a
	// window that opened yesterday.
	return r.on(day) && m >= r.start || r.on((day+6)%7) && m < r.end
}

func (r Recurrence) on(d time.Weekday) bool { return r.days&(1<<d) != 0 }

// nextBoundary is the first instant after t at which r may open or close:
// the next local midnight, start or end, or the end of the zone offset in
// force at t (a clock change), whichever is first.
func (r Recurrence) nextBoundary(t time.Time) time.Time {
	if r.loc == nil {
		return time.Time{}
	}
	lt := t.In(r.loc)
	sinceMidnight := time.Duration(lt.Hour())*time.Hour + time.Duration(lt.Minute())*time.Minute +
		time.Duration(lt.Second())*time.Second + time.Duration(lt.Nanosecond())
	next := 24 * time.Hour
	for _, m := range []int{r.start, r.end} {
		if d := time.Duration(m) * time.Minute; d > sinceMidnight && d < next {
			next = d
		}
	}
	// The wall clock moves with t while the zone's offset stays the same.
	c := t.Add(next - sinceMidnight)
	if _, end := lt.ZoneBounds(); !end.IsZero() && end.Before(c) {
		c = end
	}
	return c
}

// String writes r the way ParseRecurrence reads it.
func (r Recurrence) String() string {
	if r.loc == nil {
		return "never"
	}
	return formatDays(r.days) + " " + formatMinute(r.start) + "-" + formatMinute(r.end) + " " + r.loc.String()
}

// FormatRecurrences writes rs the way ParseRecurrences reads them.
func FormatRecurrences(rs []Recurrence) string {
	parts := make([]string, len(rs))
	for i, r := range rs {
		parts[i] = r.String()
	}
	return strings.Join(parts, "; ")
}

// RecurrenceSyntax is the form ParseRecurrence reads, for error messages
// and help texts.
const RecurrenceSyntax = `"DAYS HH:MM-HH:MM ZONE", like "weekdays 18:00-23:00 Europe/Paris" (DAYS: daily, weekdays, weekends, or days and ranges such as mon,wed or fri-sun; ZONE: an IANA name or UTC)`

// ParseRecurrences reads recurrences separated by ";".
func ParseRecurrences(s string) ([]Recurrence, error) {
	var out []Recurrence
	for i, part := range strings.Split(s, ";") {
		r, err := ParseRecurrence(part)
		if err != nil {
			if strings.Contains(s, ";") {
				return nil, fmt.Errorf("recurrence %d: %w", i+1, err)
			}
			return nil, err
		}
		out = append(out, r)
	}
	return out, nil
}

// ParseRecurrence reads "DAYS HH:MM-HH:MM ZONE" (RecurrenceSyntax). The
// end may be 24:00; an end at or before the start runs into the next day.
// ZONE is loaded with time.LoadLocation: a binary that may run where the
// system has no zone database imports time/tzdata.
func ParseRecurrence(s string) (Recurrence, error) {
	f := strings.Fields(s)
	if len(f) != 3 {
		return Recurrence{}, fmt.Errorf("%q: want %s", strings.TrimSpace(s), RecurrenceSyntax)
	}
	var r Recurrence
	var err error
	if r.days, err = parseDays(f[0]); err != nil {
		return Recurrence{}, fmt.Errorf("%q: %v", strings.TrimSpace(s), err)
	}
	from, to, ok := strings.Cut(f[1], "-")
	if !ok {
		return Recurrence{}, fmt.Errorf("%q: the times %q are not HH:MM-HH:MM", strings.TrimSpace(s), f[1])
	}
	if r.start, err = parseMinute(from); err != nil {
		return Recurrence{}, fmt.Errorf("%q: start: %v", strings.TrimSpace(s), err)
	}
	if r.start == 24*60 {
		return Recurrence{}, fmt.Errorf("%q: start: 24:00 is the end of a day; start at 00:00 instead", strings.TrimSpace(s))
	}
	if r.end, err = parseMinute(to); err != nil {
		return Recurrence{}, fmt.Errorf("%q: end: %v", strings.TrimSpace(s), err)
	}
	if r.end == r.start {
		return Recurrence{}, fmt.Errorf("%q: start and end are the same time; for a whole day write 00:00-24:00", strings.TrimSpace(s))
	}
	if r.end == 0 {
		// "22:00-00:00" ends at midnight: the same as 24:00, kept on
		// the same day.
		r.end = 24 * 60
	}
	if r.loc, err = loadZone(f[2]); err != nil {
		return Recurrence{}, fmt.Errorf("%q: %v", strings.TrimSpace(s), err)
	}
	return r, nil
}

func loadZone(name string) (*time.Location, error) {
	if name == "Local" {
		return nil, errors.New(`the time zone "Local" depends on the machine; name the zone, like Europe/Paris or UTC`)
	}
	loc, err := time.LoadLocation(name)
	if err != nil {
		return nil, fmt.Errorf("unknown time zone %q: want an IANA name such as Europe/Paris or America/New_York, or UTC", name)
	}
	return loc, nil
}

var dayNames = map[string]time.Weekday{
	"sun": time.Sunday, "mon": time.Monday, "tue": time.Tuesday, "wed": time.Wednesday,
	"thu": time.Thursday, "fri": time.Friday, "sat": time.Saturday,
	"sunday": time.Sunday, "monday": time.Monday, "tuesday": time.Tuesday, "wednesday": time.Wednesday,
	"thursday": time.Thursday, "friday": time.Friday, "saturday": time.Saturday,
}

const (
	allDays     = 0x7f
	weekdayBits = 0x3e // Monday to Friday
	weekendBits = 0x41 // Saturday and Sunday
)

func parseDays(s string) (uint8, error) {
	switch strings.ToLower(s) {
	case "daily":
		return allDays, nil
	case "weekdays":
		return weekdayBits, nil
	case "weekends":
		return weekendBits, nil
	}
	var days uint8
	for _, item := range strings.Split(strings.ToLower(s), ",") {
		from, to, isRange := strings.Cut(item, "-")
		a, ok := dayNames[from]
		if !ok {
			return 0, fmt.Errorf("days: %q is not a day (mon, tue, ..., sun), nor daily, weekdays or weekends", from)
		}
		if !isRange {
			days |= 1 << a
			continue
		}
		b, ok := dayNames[to]
		if !ok {
			return 0, fmt.Errorf("days: %q is not a day (mon, tue, ..., sun)", to)
		}
		// A range may wrap past Sunday: fri-mon is Friday to Monday.
		for d := a; ; d = (d + 1) % 7 {
			days |= 1 << d
			if d == b {
				break
			}
		}
	}
	return days, nil
}

func formatDays(days uint8) string {
	switch days {
	case allDays:
		return "daily"
	case weekdayBits:
		return "weekdays"
	case weekendBits:
		return "weekends"
	}
	var names []string
	// Monday first, as a week is read in most calendars the zones are in.
	for i := 1; i <= 7; i++ {
		d := time.Weekday(i % 7)
		if days&(1<<d) != 0 {
			names = append(names, strings.ToLower(d.String()[:3]))
		}
	}
	return strings.Join(names, ",")
}

func parseMinute(s string) (int, error) {
	hh, mm, ok := strings.Cut(s, ":")
	if !ok || len(hh) < 1 || len(hh) > 2 || len(mm) != 2 {
		return 0, fmt.Errorf("%q is not HH:MM", s)
	}
	h, err1 := strconv.Atoi(hh)
	m, err2 := strconv.Atoi(mm)
	if err1 != nil || err2 != nil || h < 0 || m < 0 || m > 59 || h > 24 || h == 24 && m != 0 {
		return 0, fmt.Errorf("%q is not a time of day from 00:00 to 24:00", s)
	}
	return h*60 + m, nil
}

func formatMinute(m int) string { return fmt.Sprintf("%02d:%02d", m/60, m%60) }

// PoliciesAt returns the policies whose window is open at t, in their
// order. When every policy is in force it returns policies itself, so the
// result must be read only.
func PoliciesAt(policies []Policy, t time.Time) []Policy {
	n := 0
	for _, p := range policies {
		if p.Window.Open(t) {
			n++
		}
	}
	if n == len(policies) {
		return policies
	}
	out := make([]Policy, 0, n)
	for _, p := range policies {
		if p.Window.Open(t) {
			out = append(out, p)
		}
	}
	return out
}

// NextPolicyChange returns the first instant after t, and not after limit,
// at which one of policies enters or leaves its window; false when none
// does by limit.
func NextPolicyChange(policies []Policy, t, limit time.Time) (time.Time, bool) {
	var best time.Time
	found := false
	for _, p := range policies {
		if c, ok := p.Window.NextChange(t, limit); ok && (!found || c.Before(best)) {
			best, found = c, true
			limit = c // nothing later matters
		}
	}
	return best, found
}
