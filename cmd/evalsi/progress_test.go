package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vbauerster/mpb/v8"

	"evals.si/engine"
	"evals.si/modelserver"
	"evals.si/spec"
)

// The live progress of `evalsi run` shows a provider that rate-limits the
// run: its adaptive window and how many 429s it answered.
func TestProgressShowsRateLimitedProvider(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// Every request is answered 429 once, then served (the SDK retries).
	srv := modelserver.New(&spec.Script{Default: []spec.ScriptReply{{Content: "4", Status: 429}}}, nil)
	addr, err := srv.Listen(ctx, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("EVALSI_PROGRESS_TEST_KEY", "not-secret")
	var recs strings.Builder
	for i := range 6 {
		fmt.Fprintf(&recs, "    - {id: q%d, input: \"2+2? (%d)\", expected: \"4\"}\n", i, i)
	}
	specPath := filepath.Join(t.TempDir(), "limits.yaml")
	if err := os.WriteFile(specPath, []byte("concurrency: 3\ndataset:\n  records:\n"+recs.String()+
		"target:\n  connector: openai\n  model: m\n  base_url: http://"+addr.String()+"/v1\n  api_key_env: EVALSI_PROGRESS_TEST_KEY\nevaluators: [exact-match]\n"), 0o644); err != nil {
		t.Fatal(err)
	}

	r := evalsi(t, filepath.Join(t.TempDir(), "evalsi.db"), "run", "-f", specPath)
	if r.code != 0 {
		t.Fatalf("exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	// Progress goes to stdout with the summary (not with --json). Not a
	// terminal: a line per finished trial, ending with the provider's state
	// once it has been limited.
	re := regexp.MustCompile(regexp.QuoteMeta("[openai "+addr.String()+": window ") + `(\d+), limited (\d+)×\]`)
	m := re.FindAllStringSubmatch(r.stdout, -1)
	if len(m) == 0 {
		t.Fatalf("no progress line shows the rate-limited provider:\n%s", r.stdout)
	}
	if last := m[len(m)-1]; last[2] == "0" {
		t.Errorf("last progress line says %q", last[0])
	}
}

// syncBuffer is a bytes.Buffer the bar's render goroutine writes while the
// test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// screen is what a terminal shows after out: the few controls mpb uses
// (newline, carriage return, cursor up n with erase below, erase line) are
// applied; the visible non-empty lines are returned.
func screen(out string) []string {
	lines := []string{""}
	row := 0
	esc := regexp.MustCompile(`^\x1b\[(\d*)([A-Za-z])`)
	for i := 0; i < len(out); {
		switch c := out[i]; {
		case c == '\n':
			row++
			if row == len(lines) {
				lines = append(lines, "")
			}
			i++
		case c == '\r':
			lines[row] = ""
			i++
		case c == 0x1b:
			m := esc.FindStringSubmatch(out[i:])
			if m == nil {
				i++
				continue
			}
			n, _ := strconv.Atoi(m[1])
			switch m[2] {
			case "A": // cursor up
				row = max(0, row-max(n, 1))
			case "J": // erase to the end of the screen
				lines = append(lines[:row], "")
			case "K":
				lines[row] = ""
			}
			i += len(m[0])
		default:
			j := i
			for j < len(out) && out[j] != '\n' && out[j] != '\r' && out[j] != 0x1b {
				j++
			}
			lines[row] += out[i:j]
			i = j
		}
	}
	var shown []string
	for _, l := range lines {
		if strings.TrimSpace(l) != "" {
			shown = append(shown, l)
		}
	}
	return shown
}

// progressOf is the Progress a run reports after done of total trials,
// every 100th errored, with running in flight.
func progressOf(done, total, running int) engine.Progress {
	o := &engine.Outcome{RecordID: fmt.Sprintf("r%d", done), Trial: 1, Status: engine.TrialCompleted, CostUSD: 0.001}
	errored := done / 100
	if done%100 == 0 {
		o.Status, o.ErrorKind, o.Error = engine.TrialErrored, "model", "connection refused"
	}
	return engine.Progress{Total: total, Done: done, Errored: errored, Passing: done - errored, Running: running,
		CostUSD: float64(done) * 0.001, Elapsed: time.Duration(done) * time.Millisecond, Last: o}
}

// On a terminal a thousand finished trials are one bar redrawn in place,
// not a thousand lines: done/total, errored, running, rate, ETA, spend.
func TestProgressBarIsOneLine(t *testing.T) {
	var out syncBuffer
	p := newPrinter(&out, true, mpb.ForceTTY(), mpb.WithAutoRefresh(), mpb.WithWidth(200), mpb.WithRefreshRate(5*time.Millisecond))
	const total = 1000
	for i := 1; i <= total; i++ {
		p.update(progressOf(i, total, 3))
		// A change of the running count alone redraws the bar too.
		p.update(engine.Progress{Total: total, Running: 4})
		if i == total/2 {
			time.Sleep(100 * time.Millisecond) // a few redraws half way
			mid := screen(out.String())
			if len(mid) != 1 {
				t.Fatalf("half way the terminal shows %d lines, want 1:\n%s", len(mid), strings.Join(mid, "\n"))
			}
			for _, want := range []string{"500/1000 trials", "errored 5", "running 4", "/min", "ETA ", "$0.5000"} {
				if !strings.Contains(mid[0], want) {
					t.Errorf("half way the bar %q lacks %q", mid[0], want)
				}
			}
		}
	}
	p.done()
	raw := out.String()
	shown := screen(raw)
	if len(shown) != 1 {
		t.Fatalf("after 1000 trials the terminal shows %d lines, want 1:\n%s", len(shown), strings.Join(shown, "\n"))
	}
	for _, want := range []string{"1000/1000 trials", "passing 990", "errored 10", "$1.0000"} {
		if !strings.Contains(shown[0], want) {
			t.Errorf("final bar %q lacks %q", shown[0], want)
		}
	}
	if strings.Contains(shown[0], "ETA") {
		t.Errorf("final bar %q still shows an ETA", shown[0])
	}
	if !strings.Contains(raw, "\x1b[1A") {
		t.Errorf("the bar was not redrawn in place (no cursor-up in %d bytes of output)", len(raw))
	}
}

// Not on a terminal (or verbose), each finished trial is one line, and
// updates of the running count print nothing.
func TestProgressLinePerTrial(t *testing.T) {
	var out bytes.Buffer
	p := newPrinter(&out, false)
	for i := 1; i <= 200; i++ {
		p.update(engine.Progress{Total: 200, Running: 2})
		p.update(progressOf(i, 200, 1))
	}
	p.done()
	lines := strings.Split(strings.TrimRight(out.String(), "\n"), "\n")
	if len(lines) != 200 {
		t.Fatalf("%d lines for 200 trials, want 200:\n%s", len(lines), out.String())
	}
	if lines[0] != "[1/200] r1 trial 1: completed " {
		t.Errorf("first line %q", lines[0])
	}
	if want := "[100/200] r100 trial 1: errored (model: connection refused)"; lines[99] != want {
		t.Errorf("line 100 = %q, want %q", lines[99], want)
	}
	if strings.Contains(out.String(), "\x1b[") {
		t.Error("a plain output holds terminal controls")
	}
}

// A verbose run prints a line per trial even on a terminal.
func TestProgressVerboseIsLines(t *testing.T) {
	if p := newProgressPrinter(os.Stdout, true); p.bar {
		t.Error("verbose printer draws a bar")
	}
	var b bytes.Buffer
	if p := newProgressPrinter(&b, false); p.bar {
		t.Error("a printer to a buffer (no terminal) draws a bar")
	}
}
