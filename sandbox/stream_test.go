package sandbox

import (
	"bytes"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// recorder is an Output hook that keeps what it is given per stream and
// notes any call made while another runs.
type recorder struct {
	mu         sync.Mutex
	got        [2][]byte
	inFlight   atomic.Int32
	concurrent atomic.Bool
	calls      chan struct{}
}

func newRecorder() *recorder { return &recorder{calls: make(chan struct{}, 1024)} }

func (r *recorder) hook(stderr bool, p []byte) {
	if r.inFlight.Add(1) > 1 {
		r.concurrent.Store(true)
	}
	defer r.inFlight.Add(-1)
	i := 0
	if stderr {
		i = 1
	}
	r.mu.Lock()
	r.got[i] = append(r.got[i], p...)
	r.mu.Unlock()
	select {
	case r.calls <- struct{}{}:
	default:
	}
}

func (r *recorder) stream(i int) []byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	return bytes.Clone(r.got[i])
}

// waitFor waits until the hook has been given want on stream i.
func (r *recorder) waitFor(t *testing.T, i int, want string) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for string(r.stream(i)) != want {
		select {
		case <-r.calls:
		case <-deadline:
			t.Fatalf("the hook was given %q on stream %d; want %q while writing goes on (it is not delivered live)", r.stream(i), i, want)
		}
	}
}

// write is one write of a case: to stderr or stdout.
type write struct {
	stderr bool
	p      string
}

func TestOutputStream(t *testing.T) {
	cases := []struct {
		name  string
		limit int
		// writes go in order; a write to stdout of "!wait" instead waits
		// until the hook has everything written so far.
		writes     []write
		wantStdout string
		wantStderr string
		truncated  bool
	}{
		{
			name:  "live, before the next write",
			limit: 100,
			writes: []write{
				{false, "first\n"}, {false, "!wait"}, {true, "err\n"}, {false, "!wait"}, {false, "second\n"}, {false, "!wait"},
			},
			wantStdout: "first\nsecond\n", wantStderr: "err\n",
		},
		{
			name:  "never past the limit",
			limit: 5,
			writes: []write{
				{false, "hel"}, {false, "!wait"}, {false, "lo world"}, {true, "0123456789"},
			},
			wantStdout: "hello", wantStderr: "01234", truncated: true,
		},
		{
			name:   "nothing written",
			limit:  10,
			writes: nil,
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := newRecorder()
			o := NewOutputStream(tc.limit, r.hook)
			var written [2]string
			for _, w := range tc.writes {
				if w.p == "!wait" {
					for i := range 2 {
						r.waitFor(t, i, written[i][:min(len(written[i]), tc.limit)])
					}
					continue
				}
				i, wr := 0, o.Stdout()
				if w.stderr {
					i, wr = 1, o.Stderr()
				}
				if n, err := wr.Write([]byte(w.p)); n != len(w.p) || err != nil {
					t.Fatalf("Write(%q) = %d, %v; want all of it and no error", w.p, n, err)
				}
				written[i] += w.p
			}
			o.Stop()
			stdout, stderr := o.Bytes()
			if string(stdout) != tc.wantStdout || string(stderr) != tc.wantStderr || o.Truncated() != tc.truncated {
				t.Errorf("kept stdout %q stderr %q truncated %v; want %q, %q, %v", stdout, stderr, o.Truncated(), tc.wantStdout, tc.wantStderr, tc.truncated)
			}
			for i, res := range [][]byte{stdout, stderr} {
				if got := r.stream(i); !bytes.HasPrefix(res, got) {
					t.Errorf("stream %d: the hook was given %q, not a prefix of the kept %q", i, got, res)
				}
			}
		})
	}
}

// TestOutputStreamConcurrentWriters: writers on both streams at once; the
// hook is never called concurrently, what it gets is a prefix of what was
// kept, and it is never called once Stop has returned.
func TestOutputStreamConcurrentWriters(t *testing.T) {
	r := newRecorder()
	const limit = 50_000
	o := NewOutputStream(limit, r.hook)
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() {
			w := o.Stdout()
			if i%2 == 1 {
				w = o.Stderr()
			}
			for j := range 2000 {
				fmt.Fprintf(w, "%d:%d\n", i, j)
			}
		})
	}
	wg.Wait()
	o.Stop()
	before := [2][]byte{r.stream(0), r.stream(1)}
	// After Stop, writes still land in the buffers but reach no hook.
	o.Stdout().Write([]byte("late"))
	o.Stop() // idempotent
	if r.concurrent.Load() {
		t.Errorf("the hook was called while another call of it ran")
	}
	stdout, stderr := o.Bytes()
	for i, res := range [][]byte{stdout, stderr} {
		got := r.stream(i)
		if !bytes.Equal(got, before[i]) {
			t.Errorf("stream %d: the hook was given %d more bytes after Stop returned", i, len(got)-len(before[i]))
		}
		if !bytes.HasPrefix(res, got) {
			t.Errorf("stream %d: the hook's %d bytes are not a prefix of the %d kept", i, len(got), len(res))
		}
		if len(res) != limit {
			t.Errorf("stream %d kept %d bytes; want the limit %d (more was written)", i, len(res), limit)
		}
	}
}

// TestOutputStreamStopWaitsForHook: Stop returns only once a hook call in
// progress has returned.
func TestOutputStreamStopWaitsForHook(t *testing.T) {
	entered, release := make(chan struct{}), make(chan struct{})
	var finished atomic.Bool
	o := NewOutputStream(100, func(bool, []byte) {
		close(entered)
		<-release
		finished.Store(true)
	})
	o.Stdout().Write([]byte("x"))
	<-entered
	go close(release)
	o.Stop()
	if !finished.Load() {
		t.Errorf("Stop returned while the hook was still running")
	}
}

func TestOutputStreamNoHook(t *testing.T) {
	o := NewOutputStream(3, nil)
	o.Stdout().Write([]byte("abcdef"))
	o.Stderr().Write([]byte("x"))
	o.Stop()
	if stdout, stderr := o.Bytes(); string(stdout) != "abc" || string(stderr) != "x" || !o.Truncated() {
		t.Errorf("without a hook: stdout %q stderr %q truncated %v; want \"abc\", \"x\", true", stdout, stderr, o.Truncated())
	}
}
