package trace

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"strconv"
	"time"
	"unicode/utf8"
)

// AppendRecord appends r as one JSON line (without the newline), the same
// document encoding/json would write for it, written by hand: an
// allocator's tracer writes one per request, and encoding/json's
// reflection and its re-validation of the request's raw JSON took most of
// the tracer's time. The request must be valid JSON; it is copied as it is.
func AppendRecord(b []byte, r *Record) ([]byte, error) {
	req := r.Request
	if len(req) > 0 {
		if !json.Valid(req) {
			return b, errors.New("request: not valid JSON")
		}
		if bytes.ContainsAny(req, "\r\n") {
			// A line holds one record: fold the request's own lines.
			var c bytes.Buffer
			if err := json.Compact(&c, req); err != nil {
				return b, err
			}
			req = c.Bytes()
		}
	}
	b = append(b, `{"at":"`...)
	b = r.At.AppendFormat(b, time.RFC3339Nano)
	b = append(b, '"')
	if r.Event != "" {
		b = append(b, `,"event":`...)
		b = appendString(b, r.Event)
	}
	if len(req) > 0 {
		b = append(b, `,"request":`...)
		b = append(b, req...)
	}
	b = append(b, `,"outcome":`...)
	b = appendString(b, r.Outcome)
	if r.Cluster != "" {
		b = append(b, `,"cluster":`...)
		b = appendString(b, r.Cluster)
	}
	if r.GameServer != "" {
		b = append(b, `,"gameServer":`...)
		b = appendString(b, r.GameServer)
	}
	b = append(b, `,"latencyMs":`...)
	lat := r.LatencyMs
	if math.IsNaN(lat) || math.IsInf(lat, 0) {
		return b, errors.New("latencyMs: not a finite number")
	}
	b = strconv.AppendFloat(b, lat, 'g', -1, 64)
	if r.Retries != 0 {
		b = append(b, `,"retries":`...)
		b = strconv.AppendInt(b, int64(r.Retries), 10)
	}
	return append(b, '}'), nil
}

const hexDigits = "0123456789abcdef"

// appendString appends s as a JSON string: quotes, backslashes and control
// characters escaped, invalid UTF-8 replaced by U+FFFD, as encoding/json
// does (without its HTML escaping, which a trace does not need).
func appendString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		// U+2028 and U+2029 are valid JSON but end lines in JavaScript;
		// encoding/json escapes them, and so does this.
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
