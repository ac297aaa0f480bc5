package main

import (
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/vbauerster/mpb/v8"
	"github.com/vbauerster/mpb/v8/decor"
	"golang.org/x/term"

	"evals.si/engine"
	"evals.si/internal/errtext"
)

// progressPrinter shows live progress. On a terminal it is one bar that
// mpb redraws in place (done/total, errored, running, rate, ETA, spend and
// the rate-limited providers), so a 1000-trial run stays one line; not on a
// terminal, or verbose, it prints a plain line per finished trial. A nil
// printer prints nothing.
type progressPrinter struct {
	w   io.Writer
	bar bool
	// opts are the bar container's options (tests render to a buffer).
	opts []mpb.ContainerOption

	barMu sync.Mutex
	mu    sync.Mutex
	last  engine.Progress
	any   bool
	// base is how many trials were done before this printer's first update
	// (a resumed run's earlier ones): the rate counts only the rest.
	base  int
	start time.Time
	p     *mpb.Progress
	b     *mpb.Bar
}

// newProgressPrinter prints progress to w: a live bar when w is a terminal
// and not verbose, a line per finished trial otherwise.
func newProgressPrinter(w io.Writer, verbose bool) *progressPrinter {
	tty := false
	if f, ok := w.(*os.File); ok {
		tty = term.IsTerminal(int(f.Fd()))
	}
	return newPrinter(w, tty && !verbose)
}

func newPrinter(w io.Writer, bar bool, opts ...mpb.ContainerOption) *progressPrinter {
	return &progressPrinter{w: w, bar: bar, opts: opts}
}

// update shows pr: a finished trial (pr.Last), or only a change of the
// number running (pr.Last nil), which a line per trial does not print.
func (p *progressPrinter) update(pr engine.Progress) {
	if p == nil {
		return
	}
	if !p.bar {
		if pr.Last != nil {
			p.mu.Lock()
			fmt.Fprintln(p.w, trialLine(pr))
			p.mu.Unlock()
		}
		return
	}
	// The bar's calls wait for its render goroutine, whose decorators take
	// p.mu: they are made under barMu only.
	p.barMu.Lock()
	defer p.barMu.Unlock()
	p.mu.Lock()
	first := !p.any
	if first {
		p.any = true
		p.start = time.Now()
		p.base = pr.Done
		if pr.Last != nil {
			p.base--
		}
	}
	if pr.Last == nil && !first {
		// Only the running count is new: keep the counts of the latest
		// finished trial (updates may arrive out of order).
		p.last.Running, p.last.Elapsed = pr.Running, pr.Elapsed
	} else if pr.Done >= p.last.Done {
		p.last = pr
	}
	done, total := p.last.Done, p.last.Total
	p.mu.Unlock()
	if first {
		p.startBar(total)
	}
	p.b.SetTotal(int64(total), false)
	p.b.SetCurrent(int64(done))
}

// startBar adds the one bar; its decorators read the latest progress at
// each redraw, so rate and ETA move between trials too.
func (p *progressPrinter) startBar(total int) {
	opts := append([]mpb.ContainerOption{mpb.WithOutput(p.w), mpb.WithRefreshRate(200 * time.Millisecond)}, p.opts...)
	p.p = mpb.New(opts...)
	p.b = p.p.New(int64(total), mpb.BarStyle().Lbound("[").Rbound("]"),
		mpb.BarWidth(24),
		mpb.PrependDecorators(decor.Any(func(decor.Statistics) string {
			p.mu.Lock()
			defer p.mu.Unlock()
			return fmt.Sprintf("%d/%d trials", p.last.Done, p.last.Total)
		})),
		mpb.AppendDecorators(decor.Any(func(decor.Statistics) string {
			p.mu.Lock()
			defer p.mu.Unlock()
			return p.status(time.Since(p.start))
		})),
	)
}

// status is the text after the bar.
func (p *progressPrinter) status(elapsed time.Duration) string {
	pr := p.last
	s := fmt.Sprintf("passing %d  errored %d  running %d", pr.Passing, pr.Errored, pr.Running)
	if n := pr.Done - p.base; n > 0 && elapsed > 0 {
		perMin := float64(n) / elapsed.Minutes()
		s += fmt.Sprintf("  %.1f/min", perMin)
		if left := pr.Total - pr.Done; left > 0 {
			s += "  ETA " + (time.Duration(float64(left) / perMin * float64(time.Minute))).Round(time.Second).String()
		}
	}
	s += fmt.Sprintf("  $%.4f  %s", pr.CostUSD, elapsed.Round(time.Second))
	return s + providers(pr)
}

// done ends the display: the bar is drawn a last time and left on screen.
func (p *progressPrinter) done() {
	if p == nil {
		return
	}
	p.barMu.Lock()
	b, bp := p.b, p.p
	p.barMu.Unlock()
	if b == nil {
		return
	}
	if !b.Completed() {
		b.Abort(false) // interrupted, or trials left: keep the bar as it is
	}
	bp.Wait()
}

// trialLine is the line for a finished trial when not drawing a bar.
func trialLine(pr engine.Progress) string {
	o := pr.Last
	line := fmt.Sprintf("[%d/%d] %s trial %d: %s", pr.Done, pr.Total, o.RecordID, o.Trial, o.Status)
	if o.Status == engine.TrialErrored {
		line += fmt.Sprintf(" (%s: %s)", o.ErrorKind, firstLine(o.Error))
	} else {
		var parts []string
		for _, s := range o.Scores() {
			parts = append(parts, fmt.Sprintf("%s=%.3g", s.Name, s.Value))
		}
		sort.Strings(parts)
		line += " " + strings.Join(parts, " ")
	}
	return line + providers(pr)
}

// firstLine fits an error on the progress line, keeping its root cause
// (the end of the chain) when it is too long.
func firstLine(s string) string { return errtext.OneLine(s, 160) }

// providers shows each model provider that has been rate limited: its
// current concurrency window and how many 429/5xx answers it got.
func providers(pr engine.Progress) string {
	var parts []string
	for _, l := range pr.Providers {
		if l.Limited == 0 {
			continue
		}
		parts = append(parts, fmt.Sprintf("%s: window %d, limited %d×", l.Name, l.Window, l.Limited))
	}
	if len(parts) == 0 {
		return ""
	}
	return "  [" + strings.Join(parts, "; ") + "]"
}
