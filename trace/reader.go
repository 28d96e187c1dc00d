package trace

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
)

// MaxLine bounds one record's line. A request is at most 256 KiB as a
// protobuf (the allocator's default limit); its JSON is larger but not four
// times so. A longer line is refused rather than buffered without end.
const MaxLine = 1 << 20

// Reader reads records from a trace, one line at a time.
type Reader struct {
	br   *bufio.Reader
	line int
	buf  []byte
}

// NewReader reads the trace in r.
func NewReader(r io.Reader) *Reader {
	return &Reader{br: bufio.NewReaderSize(r, 64<<10)}
}

// Line is the number of the line the last record (or error) came from.
func (r *Reader) Line() int { return r.line }

// Next returns the next record, or io.EOF after the last. Blank lines are
// skipped. Any other error names the line and what is wrong with it; the
// reader should not be used after one.
func (r *Reader) Next() (Record, error) {
	for {
		line, err := r.readLine()
		if err != nil {
			return Record{}, err
		}
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		rec, err := decodeLine(line)
		if err != nil {
			return Record{}, fmt.Errorf("line %d: %w", r.line, err)
		}
		return rec, nil
	}
}

// readLine returns the next line without its newline, or io.EOF when there
// is none.
func (r *Reader) readLine() ([]byte, error) {
	r.buf = r.buf[:0]
	for {
		chunk, err := r.br.ReadSlice('\n')
		r.buf = append(r.buf, chunk...)
		if len(r.buf) > MaxLine+1 {
			r.line++
			return nil, fmt.Errorf("line %d: longer than %d bytes; not a trace record", r.line, MaxLine)
		}
		switch {
		case err == nil:
			r.line++
			return r.buf[:len(r.buf)-1], nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case err == io.EOF:
			if len(r.buf) == 0 {
				return nil, io.EOF
			}
			// A last line without its newline is a record all the same
			// (a file cut short mid-line fails to decode, below).
			r.line++
			return r.buf, nil
		default:
			return nil, err
		}
	}
}

func decodeLine(line []byte) (Record, error) {
	var rec Record
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&rec); err != nil {
		return Record{}, describe(line, err)
	}
	if dec.More() {
		return Record{}, errors.New("more than one JSON value on the line (one record per line)")
	}
	// Anything but white space after the object (a stray "]")?
	if rest, _ := io.ReadAll(dec.Buffered()); len(bytes.TrimSpace(rest)) > 0 {
		return Record{}, fmt.Errorf("unexpected %q after the record", bytes.TrimSpace(rest))
	}
	if err := rec.Validate(); err != nil {
		return Record{}, err
	}
	return rec, nil
}

// describe turns a decoding error into what a person reading the line
// needs: the column, and the field when there is one.
func describe(line []byte, err error) error {
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &se):
		return fmt.Errorf("column %d: not JSON: %v", se.Offset, se)
	case errors.As(err, &te):
		return fmt.Errorf("%s: a JSON %s where %s belongs", te.Field, te.Value, te.Type)
	case errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		return fmt.Errorf("the record ends early (%d bytes; a file cut short?)", len(line))
	}
	return err
}

// ReadAll reads every record of r. Records with the same request share
// one copy of its bytes: a trace repeats a few requests millions of times.
func ReadAll(r io.Reader) ([]Record, error) {
	return readAll(r, map[string]json.RawMessage{}, nil)
}

func readAll(r io.Reader, intern map[string]json.RawMessage, out []Record) ([]Record, error) {
	rd := NewReader(r)
	for {
		rec, err := rd.Next()
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		if len(rec.Request) > 0 {
			if same, ok := intern[string(rec.Request)]; ok {
				rec.Request = same
			} else if len(intern) < maxInterned {
				intern[string(rec.Request)] = rec.Request
			}
		}
		out = append(out, rec)
	}
}

// maxInterned bounds the distinct requests ReadAll shares (a trace of
// all-different requests gains nothing from it).
const maxInterned = 1 << 16

// Files lists the files of the trace at path, oldest first: the rotated
// ones (path.N down to path.1) that exist, then path itself.
func Files(path string) ([]string, error) {
	var out []string
	for i := maxKeep; i >= 1; i-- {
		p := path + "." + strconv.Itoa(i)
		if _, err := os.Stat(p); err == nil {
			out = append(out, p)
		}
	}
	if _, err := os.Stat(path); err != nil {
		if len(out) == 0 {
			return nil, err
		}
	} else {
		out = append(out, path)
	}
	return out, nil
}

// ReadFiles reads the trace at path with its rotated files, oldest first.
// Errors name the file and line.
func ReadFiles(path string) ([]Record, error) {
	files, err := Files(path)
	if err != nil {
		return nil, err
	}
	var out []Record
	intern := map[string]json.RawMessage{}
	for _, f := range files {
		fh, err := os.Open(f)
		if err != nil {
			return nil, err
		}
		out, err = readAll(fh, intern, out)
		fh.Close()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", f, err)
		}
	}
	return out, nil
}
