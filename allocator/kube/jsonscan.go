package kube

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"unicode/utf8"
)

// A watch event for a GameServer is mostly bytes the allocator never reads:
// the pod template, managedFields, health settings. encoding/json walks
// every byte through its state machine, several times over (once to frame
// the value, once to validate, once to decode). The scanner here only finds
// where a value ends — strings by searching for the next quote, containers
// by counting brackets — so the fields the backend does read (metadata's
// identity, labels and annotations, and status) can be handed to
// encoding/json on their own and the rest skipped at memory speed.
//
// It does not validate what it skips. It never needs to: the bytes come from
// the API server, the fields that are read are validated by encoding/json,
// and the object written back is validated by the API server again.

// errIncomplete says the input ended inside a value: read more and retry.
var errIncomplete = errors.New("incomplete JSON value")

func isSpace(c byte) bool { return c == ' ' || c == '\n' || c == '\r' || c == '\t' }

func skipSpace(b []byte, i int) int {
	for i < len(b) && isSpace(b[i]) {
		i++
	}
	return i
}

// skipString returns the index just past the string whose opening quote is
// at b[i].
func skipString(b []byte, i int) (int, error) {
	i++
	for {
		j := bytes.IndexByte(b[i:], '"')
		if j < 0 {
			return 0, errIncomplete
		}
		q := i + j
		// The quote ends the string unless an odd number of backslashes
		// escapes it.
		n := 0
		for k := q - 1; k >= i && b[k] == '\\'; k-- {
			n++
		}
		if n%2 == 0 {
			return q + 1, nil
		}
		i = q + 1
	}
}

// skipValue returns the index just past the value starting at b[i] (which
// must not be white space).
func skipValue(b []byte, i int) (int, error) {
	if i >= len(b) {
		return 0, errIncomplete
	}
	switch b[i] {
	case '"':
		return skipString(b, i)
	case '{', '[':
		depth := 0
		for i < len(b) {
			switch b[i] {
			case '"':
				end, err := skipString(b, i)
				if err != nil {
					return 0, err
				}
				i = end
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return i + 1, nil
				}
			}
			i++
		}
		return 0, errIncomplete
	default:
		// A number or literal ends at a delimiter; at the end of the
		// input it may be incomplete, but callers only reach here inside
		// a container, whose closing bracket comes later.
		j := i
		for j < len(b) && !isSpace(b[j]) && b[j] != ',' && b[j] != '}' && b[j] != ']' {
			j++
		}
		if j == i {
			return 0, fmt.Errorf("unexpected %q at offset %d", b[i], i)
		}
		if j == len(b) {
			return 0, errIncomplete
		}
		return j, nil
	}
}

// objectFields calls fn with every member of the JSON object b, its key
// unquoted and its value's bytes (a sub-slice of b) untouched.
func objectFields(b []byte, fn func(key string, value []byte) error) error {
	end, err := scanObject(b, fn)
	if err != nil {
		return err
	}
	if skipSpace(b, end) != len(b) {
		return errors.New("data after the JSON object")
	}
	return nil
}

// scanObject is objectFields for an object at the start of b that may be
// followed by more data; it returns the index just past the object, or
// errIncomplete if b ends inside it (fn may then have been called for the
// members before the cut).
func scanObject(b []byte, fn func(key string, value []byte) error) (int, error) {
	return scanMembers(b, func(key string, _, valStart, valEnd int) error { return fn(key, b[valStart:valEnd]) })
}

// scanMembers is scanObject reporting where each member is in b: its key
// starts at keyStart and its value spans [valStart, valEnd).
func scanMembers(b []byte, fn func(key string, keyStart, valStart, valEnd int) error) (int, error) {
	i := skipSpace(b, 0)
	if i >= len(b) {
		return 0, errIncomplete
	}
	if b[i] != '{' {
		return 0, fmt.Errorf("expected a JSON object, found %q", b[i])
	}
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == '}' {
		return i + 1, nil
	}
	for {
		if i >= len(b) {
			return 0, errIncomplete
		}
		if b[i] != '"' {
			return 0, fmt.Errorf("expected a key at offset %d", i)
		}
		keyStart := i
		end, err := skipString(b, i)
		if err != nil {
			return 0, err
		}
		key, err := unquote(b[i:end])
		if err != nil {
			return 0, err
		}
		i = skipSpace(b, end)
		if i >= len(b) {
			return 0, errIncomplete
		}
		if b[i] != ':' {
			return 0, fmt.Errorf("expected ':' at offset %d", i)
		}
		i = skipSpace(b, i+1)
		end, err = skipValue(b, i)
		if err != nil {
			return 0, err
		}
		if err := fn(key, keyStart, i, end); err != nil {
			return 0, err
		}
		i = skipSpace(b, end)
		if i >= len(b) {
			return 0, errIncomplete
		}
		switch b[i] {
		case ',':
			i = skipSpace(b, i+1)
		case '}':
			return i + 1, nil
		default:
			return 0, fmt.Errorf("expected ',' or '}' at offset %d", i)
		}
	}
}

// unquote decodes a JSON string; plain ones (the usual case) without
// encoding/json.
func unquote(v []byte) (string, error) {
	if len(v) >= 2 && v[0] == '"' && v[len(v)-1] == '"' && bytes.IndexByte(v, '\\') < 0 {
		ok := true
		for _, c := range v[1 : len(v)-1] {
			if c < 0x20 {
				ok = false
				break
			}
		}
		if ok && utf8.Valid(v[1:len(v)-1]) {
			return string(v[1 : len(v)-1]), nil
		}
	}
	var s string
	if err := json.Unmarshal(v, &s); err != nil {
		return "", err
	}
	return s, nil
}

// withoutMember returns the JSON object b without its member named key, in
// a new slice, or b itself when it has no such member. Everything else is
// kept byte for byte.
func withoutMember(b []byte, key string) ([]byte, error) {
	from, to := -1, -1
	prevEnd := -1 // end of the member before the one dropped
	_, err := scanMembers(b, func(k string, keyStart, _, valEnd int) error {
		switch {
		case k == key && from < 0:
			from, to = keyStart, valEnd
			if prevEnd >= 0 {
				from = prevEnd // drop the comma before it, and the spaces
			}
		case from >= 0 && prevEnd == to && b[from] == '"':
			// It was the first member: drop the comma after it instead.
			to = keyStart
		}
		prevEnd = valEnd
		return nil
	})
	if err != nil {
		return nil, err
	}
	if from < 0 {
		return b, nil
	}
	out := make([]byte, 0, len(b)-(to-from))
	out = append(out, b[:from]...)
	return append(out, b[to:]...), nil
}
