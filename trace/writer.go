package trace

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
)

// maxKeep bounds the rotated files a trace keeps (and Files looks for).
const maxKeep = 9

// DefaultKeep is how many rotated files a Writer keeps beside the current
// one.
const DefaultKeep = 3

// minFileBytes is the smallest per-file bound: below it a file would
// rotate on nearly every record.
const minFileBytes = 4 << 10

// Writer writes records to a file, rotating it so that the trace never
// takes more than MaxBytes on disk: when the current file would grow past
// MaxBytes/(Keep+1), it becomes path.1 (path.1 becomes path.2, and so on;
// the oldest beyond Keep is deleted) and a new file starts. A Writer is not
// safe for concurrent use; Async is the concurrent front.
type Writer struct {
	path    string
	perFile int64 // 0: no bound
	keep    int
	f       *os.File
	bw      *bufio.Writer
	size    int64
	line    []byte
}

// WriterOptions bound a trace's size.
type WriterOptions struct {
	// MaxBytes bounds the trace on disk, rotated files included (0: no
	// bound, one file).
	MaxBytes int64
	// Keep is how many rotated files to keep (default DefaultKeep, at
	// most 9).
	Keep int
}

// NewWriter creates (or truncates) the trace at path. Rotated files of an
// earlier trace at the same path are removed, so that a reader never mixes
// two runs.
func NewWriter(path string, o WriterOptions) (*Writer, error) {
	if o.MaxBytes < 0 {
		return nil, fmt.Errorf("trace: max bytes %d: want 0 (no bound) or more", o.MaxBytes)
	}
	if o.Keep == 0 {
		o.Keep = DefaultKeep
	}
	if o.Keep < 1 || o.Keep > maxKeep {
		return nil, fmt.Errorf("trace: keep %d: want 1 to %d rotated files", o.Keep, maxKeep)
	}
	w := &Writer{path: path, keep: o.Keep}
	if o.MaxBytes > 0 {
		w.perFile = o.MaxBytes / int64(o.Keep+1)
		if w.perFile < minFileBytes {
			return nil, fmt.Errorf("trace: max bytes %d is too small: with %d rotated files each would hold under %d bytes; give at least %d",
				o.MaxBytes, o.Keep, minFileBytes, minFileBytes*int64(o.Keep+1))
		}
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("trace: %w", err)
	}
	for i := 1; i <= maxKeep; i++ {
		if err := os.Remove(w.rotated(i)); err != nil && !errors.Is(err, os.ErrNotExist) {
			f.Close()
			return nil, fmt.Errorf("trace: removing an earlier rotated file: %w", err)
		}
	}
	w.f, w.bw = f, bufio.NewWriterSize(f, 64<<10)
	return w, nil
}

func (w *Writer) rotated(i int) string { return w.path + "." + strconv.Itoa(i) }

// Write appends one record. A record larger than a whole file's bound is
// written all the same, alone in its file: a trace loses no record to its
// bound, only old files.
func (w *Writer) Write(rec *Record) error {
	if w.f == nil {
		return errors.New("trace: write after close")
	}
	line, err := AppendRecord(w.line[:0], rec)
	if err != nil {
		return fmt.Errorf("trace: encoding a record: %w", err)
	}
	w.line = append(line, '\n')
	if w.perFile > 0 && w.size > 0 && w.size+int64(len(w.line)) > w.perFile {
		if err := w.rotate(); err != nil {
			return err
		}
	}
	n, err := w.bw.Write(w.line)
	w.size += int64(n)
	if err != nil {
		return fmt.Errorf("trace: %w", err)
	}
	return nil
}

// rotate closes the current file, shifts the rotated ones and starts anew.
func (w *Writer) rotate() error {
	if err := w.closeFile(); err != nil {
		return err
	}
	os.Remove(w.rotated(w.keep)) // the oldest goes; absent is fine
	for i := w.keep - 1; i >= 1; i-- {
		if err := os.Rename(w.rotated(i), w.rotated(i+1)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("trace: rotating: %w", err)
		}
	}
	if err := os.Rename(w.path, w.rotated(1)); err != nil {
		return fmt.Errorf("trace: rotating: %w", err)
	}
	f, err := os.Create(w.path)
	if err != nil {
		return fmt.Errorf("trace: %w", err)
	}
	w.f, w.size = f, 0
	w.bw.Reset(f)
	return nil
}

func (w *Writer) closeFile() error {
	err := w.bw.Flush()
	if cerr := w.f.Close(); err == nil {
		err = cerr
	}
	w.f = nil
	if err != nil {
		return fmt.Errorf("trace: %w", err)
	}
	return nil
}

// Flush writes buffered records to the file.
func (w *Writer) Flush() error {
	if w.f == nil {
		return nil
	}
	if err := w.bw.Flush(); err != nil {
		return fmt.Errorf("trace: %w", err)
	}
	return nil
}

// Close flushes and closes the file.
func (w *Writer) Close() error {
	if w.f == nil {
		return nil
	}
	return w.closeFile()
}

// Async writes records on a goroutine of its own, so that whoever records
// (an allocation's request path) never waits for the disk. Items of type T
// are queued as they are, in a channel of bounded size: queuing one costs
// no heap allocation, and turning it into a Record (encoding the request,
// say) happens on the writing goroutine. When the queue is full the item is
// dropped and counted: a slow disk costs trace records, never allocations.
type Async[T any] struct {
	w       *Writer
	conv    func(*T, *Record)
	ch      chan T
	stop    chan struct{}
	done    chan struct{}
	closed  atomic.Bool
	once    sync.Once
	dropped atomic.Uint64
	written atomic.Uint64
	failed  atomic.Uint64
	errMu   sync.Mutex
	err     error
	onErr   func(error)
}

// NewAsync starts writing to w what Add queues, converted by conv. buffer
// is the queue's size (at least 1). onErr, when set, is told of the first
// write error (later ones are only counted).
func NewAsync[T any](w *Writer, buffer int, conv func(*T, *Record), onErr func(error)) *Async[T] {
	a := &Async[T]{w: w, conv: conv, ch: make(chan T, max(buffer, 1)),
		stop: make(chan struct{}), done: make(chan struct{}), onErr: onErr}
	go a.loop()
	return a
}

// Add queues v without waiting; false when the queue was full (or the
// writer closed) and v was dropped.
func (a *Async[T]) Add(v T) bool {
	if a.closed.Load() {
		a.dropped.Add(1)
		return false
	}
	select {
	case a.ch <- v:
		return true
	default:
		a.dropped.Add(1)
		return false
	}
}

// Dropped is how many items found the queue full.
func (a *Async[T]) Dropped() uint64 { return a.dropped.Load() }

// Written is how many records reached the writer.
func (a *Async[T]) Written() uint64 { return a.written.Load() }

// Failed is how many records the writer could not write.
func (a *Async[T]) Failed() uint64 { return a.failed.Load() }

func (a *Async[T]) loop() {
	defer close(a.done)
	var rec Record
	write := func(v *T) {
		rec = Record{}
		a.conv(v, &rec)
		if err := a.w.Write(&rec); err != nil {
			a.fail(err)
			return
		}
		a.written.Add(1)
	}
	for {
		select {
		case v := <-a.ch:
			write(&v)
			// Flush once the queue is empty, so the file is current
			// whenever the recorder is idle, without a write per record
			// under load.
			if len(a.ch) == 0 {
				if err := a.w.Flush(); err != nil {
					a.fail(err)
				}
			}
		case <-a.stop:
			for {
				select {
				case v := <-a.ch:
					write(&v)
				default:
					if err := a.w.Close(); err != nil {
						a.fail(err)
					}
					return
				}
			}
		}
	}
}

func (a *Async[T]) fail(err error) {
	a.failed.Add(1)
	a.errMu.Lock()
	first := a.err == nil
	if first {
		a.err = err
	}
	a.errMu.Unlock()
	if first && a.onErr != nil {
		a.onErr(err)
	}
}

// Close writes what is queued, closes the file and returns the first write
// error, if any. Items added after Close are dropped.
func (a *Async[T]) Close() error {
	a.once.Do(func() {
		a.closed.Store(true)
		close(a.stop)
	})
	<-a.done
	a.errMu.Lock()
	defer a.errMu.Unlock()
	return a.err
}
