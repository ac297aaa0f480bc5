package main

import (
	"fmt"
	"io"
	"os"
	"sort"
	"strings"

	"golang.org/x/term"

	"evals.si/engine"
)

// progressPrinter shows live progress: one rewritten line on a terminal,
// a plain line per finished trial otherwise. A nil printer prints nothing.
type progressPrinter struct {
	w   io.Writer
	tty bool
	any bool
}

func newProgressPrinter(w io.Writer) *progressPrinter {
	tty := false
	if f, ok := w.(*os.File); ok {
		tty = term.IsTerminal(int(f.Fd()))
	}
	return &progressPrinter{w: w, tty: tty}
}

func (p *progressPrinter) update(pr engine.Progress) {
	if p == nil {
		return
	}
	p.any = true
	if p.tty {
		fmt.Fprintf(p.w, "\r\033[K%d/%d trials  passing %d  errors %d  spend $%.4f  %s%s",
			pr.Done, pr.Total, pr.Passing, pr.Errored, pr.CostUSD, pr.Elapsed.Round(1e8), providers(pr))
		return
	}
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
	fmt.Fprintln(p.w, line+providers(pr))
}

func (p *progressPrinter) done() {
	if p != nil && p.tty && p.any {
		fmt.Fprintln(p.w)
	}
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	if len(s) > 160 {
		s = s[:160] + "…"
	}
	return s
}

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
