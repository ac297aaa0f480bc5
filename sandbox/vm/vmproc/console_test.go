package vmproc

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// consoleText is n bytes of numbered lines, so that any cut shows where
// it is.
func consoleText(n int) []byte {
	var b bytes.Buffer
	for i := 0; b.Len() < n; i++ {
		fmt.Fprintf(&b, "[%9d] line %d of the guest's console\n", i, i)
	}
	return b.Bytes()[:n]
}

// kept is what the log should hold of in: all of it, or its ends and a
// marker.
func kept(in []byte) []byte {
	if len(in) <= HeadSize+TailSize {
		return in
	}
	var b []byte
	b = append(b, in[:HeadSize]...)
	b = append(b, marker(int64(len(in)-HeadSize-TailSize))...)
	return append(b, in[len(in)-TailSize:]...)
}

// writeChunks writes in to w in chunks of random sizes up to maxChunk.
func writeChunks(t *testing.T, w io.Writer, in []byte, maxChunk int, seed uint64) {
	t.Helper()
	r := rand.New(rand.NewPCG(seed, seed))
	for len(in) > 0 {
		k := min(1+r.IntN(maxChunk), len(in))
		if n, err := w.Write(in[:k]); n != k || err != nil {
			t.Fatalf("Write(%d bytes) = %d, %v", k, n, err)
		}
		in = in[k:]
	}
}

func TestConsoleKeepsBothEnds(t *testing.T) {
	cases := []struct {
		name     string
		size     int
		maxChunk int
	}{
		{"empty", 0, 1},
		{"a boot", 5000, 300},
		{"exactly the head", HeadSize, 4096},
		{"head and tail, nothing dropped", HeadSize + TailSize, 4096},
		{"one byte dropped", HeadSize + TailSize + 1, 4096},
		{"byte by byte past both ends", HeadSize + TailSize + 3000, 1},
		{"chunks larger than the tail", 1 << 20, 3 * TailSize},
		{"50 MB flood", 50 << 20, 64 << 10},
	}
	for i, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "console.log")
			con, err := OpenConsole(path, nil)
			if err != nil {
				t.Fatal(err)
			}
			in := consoleText(c.size)
			start := time.Now()
			writeChunks(t, con, in, c.maxChunk, uint64(i))
			took := time.Since(start)
			if err := con.Close(); err != nil {
				t.Fatal(err)
			}
			got, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			want := kept(in)
			if !bytes.Equal(got, want) {
				t.Fatalf("console.log has %d bytes, want %d: starts %q, ends %q", len(got), len(want), head(got, 80), tail(got, 200))
			}
			if len(got) > 130<<10 {
				t.Fatalf("console.log is %d bytes, over 130 KiB", len(got))
			}
			if d, want := con.Dropped(), max(int64(len(in)-HeadSize-TailSize), 0); d != want {
				t.Errorf("Dropped = %d, want %d", d, want)
			}
			for _, n := range []int{0, 100, 4096, HeadSize + TailSize + 1000} {
				if got, want := con.Tail(n), string(want[max(len(want)-n, 0):]); got != want {
					t.Errorf("Tail(%d) = %d bytes ending %q, want %d bytes ending %q", n, len(got), tail([]byte(got), 60), len(want), tail([]byte(want), 60))
				}
			}
			t.Logf("%d bytes written in %s, console.log %d bytes", len(in), took.Round(time.Millisecond), len(got))
		})
	}
}

func head(b []byte, n int) []byte { return b[:min(n, len(b))] }
func tail(b []byte, n int) []byte { return b[max(len(b)-n, 0):] }

// The file follows the console while it runs, not only at Close: errors
// quote it while the machine lives.
func TestConsoleWritesAsItGoes(t *testing.T) {
	path := filepath.Join(t.TempDir(), "console.log")
	con, err := OpenConsole(path, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer con.Close()
	in := consoleText(3 * (HeadSize + TailSize))
	written := 0
	for _, upTo := range []int{100, HeadSize + 10, HeadSize + TailSize, len(in) - 7, len(in)} {
		con.Write(in[written:upTo])
		written = upTo
		want := kept(in[:upTo])
		deadline := time.Now().Add(5 * time.Second)
		for {
			got, _ := os.ReadFile(path)
			if bytes.Equal(got, want) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("after %d bytes console.log has %d bytes ending %q, want %d ending %q", upTo, len(got), tail(got, 80), len(want), tail(want, 80))
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// gatedFile is a real file whose writes wait until gate is closed: a
// stalled disk (an NFS server gone, a device in error recovery).
type gatedFile struct {
	*os.File
	gate    chan struct{}
	waiting atomic.Int32
}

func (g *gatedFile) WriteAt(p []byte, off int64) (int, error) {
	g.waiting.Add(1)
	<-g.gate
	return g.File.WriteAt(p, off)
}

// A stalled disk does not slow the console's writer: 50 MB go through a
// pipe, as a VMM's output does, while the file's first write hangs. Close
// gives up after closeWait, and the file catches up once the disk does.
func TestConsoleStalledDisk(t *testing.T) {
	path := filepath.Join(t.TempDir(), "console.log")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	g := &gatedFile{File: f, gate: make(chan struct{})}
	con := newConsole(path, g, nil)
	in := consoleText(50 << 20)

	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	copied := make(chan error, 1)
	go func() {
		_, err := io.Copy(con, pr)
		copied <- err
	}()
	start := time.Now()
	if _, err := pw.Write(in); err != nil {
		t.Fatal(err)
	}
	pw.Close()
	if err := <-copied; err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	t.Logf("50 MB through the pipe in %s with the disk stalled", took.Round(time.Millisecond))
	if took > 10*time.Second {
		t.Fatalf("50 MB took %s to go through with the disk stalled: the console waits for its file", took)
	}
	if g.waiting.Load() == 0 {
		t.Fatal("the file was never written: the stall was not exercised")
	}
	if got, want := con.Tail(1000), string(tail(in, 1000)); got != want {
		t.Fatalf("Tail with the disk stalled ends %q, want %q", tail([]byte(got), 60), tail([]byte(want), 60))
	}
	start = time.Now()
	err = con.Close()
	if err == nil || !strings.Contains(err.Error(), "stalled") {
		t.Fatalf("Close with the disk stalled = %v, want it to give up", err)
	}
	if d := time.Since(start); d > closeWait+time.Second {
		t.Fatalf("Close took %s, more than %s", d, closeWait)
	}
	close(g.gate)
	select {
	case <-con.flushed:
	case <-time.After(5 * time.Second):
		t.Fatal("the file's writer did not finish once the disk came back")
	}
	if got, _ := os.ReadFile(path); !bytes.Equal(got, kept(in)) {
		t.Fatalf("once the disk came back console.log has %d bytes, want %d", len(got), len(kept(in)))
	}
}

// failingFile is a real file whose first writes fail as a full disk's do.
type failingFile struct {
	*os.File
	fails atomic.Int32
}

func (f *failingFile) WriteAt(p []byte, off int64) (int, error) {
	if f.fails.Add(-1) >= 0 {
		return 0, syscall.ENOSPC
	}
	return f.File.WriteAt(p, off)
}

// A write that fails (a full disk) is retried in full by the next one:
// the file ends whole once the disk has room, and Close says so.
func TestConsoleFullDisk(t *testing.T) {
	cases := []struct {
		name    string
		fails   int32
		wantErr bool
	}{
		{"recovers", 1, false},
		{"never recovers", 1 << 30, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "console.log")
			f, err := os.Create(path)
			if err != nil {
				t.Fatal(err)
			}
			ff := &failingFile{File: f}
			ff.fails.Store(c.fails)
			con := newConsole(path, ff, nil)
			in := consoleText(HeadSize + TailSize + 5000)
			// Three writes, spaced so that each gets a flush of its own.
			for _, part := range [][]byte{in[:1000], in[1000:HeadSize], in[HeadSize:]} {
				con.Write(part)
				time.Sleep(3 * flushInterval)
			}
			err = con.Close()
			if c.wantErr {
				if err == nil || !errors.Is(err, syscall.ENOSPC) || !strings.Contains(err.Error(), path) {
					t.Fatalf("Close = %v, want the ENOSPC naming %s", err, path)
				}
				if got := con.Tail(100); got != string(tail(kept(in), 100)) {
					t.Fatalf("Tail without a disk = %q", got)
				}
				return
			}
			if err != nil {
				t.Fatalf("Close = %v after the disk recovered", err)
			}
			if got, _ := os.ReadFile(path); !bytes.Equal(got, kept(in)) {
				t.Fatalf("console.log has %d bytes, want %d", len(got), len(kept(in)))
			}
		})
	}
}

func TestOpenConsoleError(t *testing.T) {
	_, err := OpenConsole(filepath.Join(t.TempDir(), "missing", "console.log"), nil)
	if err == nil || !strings.Contains(err.Error(), "console log") || !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("OpenConsole in a missing directory = %v", err)
	}
}
