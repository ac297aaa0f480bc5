package main

import (
	"evals.si/bench/internal/machine"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// result is what one harness measured on the task, or why it was not
// measured (skipped set, no figures).
type result struct {
	harness string // "Evals.si", "Inspect AI", "Harbor"
	version string // peer version, or the Evals.si rung
	sandbox string // how each trial is isolated
	skipped string // "not measured: …"
	rung    string // the sandbox rung the trials reported (Evals.si)

	trials, passed int
	// wall is the harness's whole run on this benchmark's clock: for a
	// peer its process from start to exit, for Evals.si from opening the
	// embedded engine to closing it.
	wall time.Duration
	// span is first trial start to last trial end, from the harness's
	// own records (the peer's log; the engine's run).
	span      time.Duration
	latencies []time.Duration // per trial, from the harness's records
	notes     []string
}

func (r *result) trialsPerSec() float64 {
	if r.wall <= 0 {
		return 0
	}
	return float64(r.trials) / r.wall.Seconds()
}

// percentile is the nearest-rank p-th percentile (p in [0,1]).
func percentile(d []time.Duration, p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	i := int(p*float64(len(s))+0.5) - 1
	return s[min(max(i, 0), len(s)-1)]
}

// header is the machine and the run's settings, printed first.
type header struct {
	when        time.Time
	cpus        int
	load        string
	osArch      string
	python      string // "3.11.7", or why unknown
	docker      string // engine version
	compose     string // compose plugin version used for the peers
	n, conc     int
	command     string
	check       string
	peerVersion map[string]string
}

func printReport(w io.Writer, h header, results []*result, loadAfter string) {
	fmt.Fprintf(w, "evalsi peers benchmark: %s, %d CPUs, load %s, %s\n", h.when.UTC().Format(time.RFC3339), h.cpus, h.load, h.osArch)
	fmt.Fprintf(w, "python3 %s; docker engine %s; docker compose %s (for the peers only)\n", h.python, h.docker, h.compose)
	var pv []string
	for _, name := range []string{"inspect-ai", "harbor"} {
		if v, ok := h.peerVersion[name]; ok {
			pv = append(pv, name+"=="+v)
		}
	}
	if len(pv) > 0 {
		fmt.Fprintf(w, "peers: %s\n", strings.Join(pv, ", "))
	}
	fmt.Fprintf(w, "task: greeting.txt in the task; agent command %q; check %q (exit code); %d trials at concurrency %d\n\n", h.command, h.check, h.n, h.conc)

	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "harness\tversion\tsandbox\ttrials\tpassed\twall\ttrials/s\tp50\tp99\ttrials span\t")
	for _, r := range results {
		if r.skipped != "" {
			fmt.Fprintf(tw, "%s\t%s\t%s\tnot measured\t\t\t\t\t\t\t\n", r.harness, r.version, r.sandbox)
			continue
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%s\t%.2f\t%s\t%s\t%s\t\n", r.harness, r.version, r.sandbox, r.trials, r.passed,
			secs(r.wall), r.trialsPerSec(), msec(percentile(r.latencies, 0.50)), msec(percentile(r.latencies, 0.99)), secs(r.span))
	}
	tw.Flush()
	for _, r := range results {
		if r.skipped != "" {
			fmt.Fprintf(w, "%s: %s\n", r.harness, r.skipped)
		}
	}

	var self *result
	for _, r := range results {
		if r.harness == evalsiName {
			self = r
		}
	}
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ratio\tmeasured\ttarget\tmet\t")
	for _, r := range results {
		if r == self {
			continue
		}
		tput := fmt.Sprintf("Evals.si trials/s ÷ %s trials/s", r.harness)
		lat := fmt.Sprintf("%s p50 ÷ Evals.si p50", r.harness)
		if self == nil || self.skipped != "" || r.skipped != "" || r.trials == 0 || self.trials == 0 {
			fmt.Fprintf(tw, "%s\tnot measured\t> 1× (Evals.si ahead)\t\t\n", tput)
			fmt.Fprintf(tw, "%s\tnot measured\t> 1× (Evals.si ahead)\t\t\n", lat)
			continue
		}
		x := self.trialsPerSec() / r.trialsPerSec()
		fmt.Fprintf(tw, "%s\t%.1f×\t> 1× (Evals.si ahead)\t%s\t\n", tput, x, met(x > 1))
		y := float64(percentile(r.latencies, 0.5)) / float64(percentile(self.latencies, 0.5))
		fmt.Fprintf(tw, "%s\t%.1f×\t> 1× (Evals.si ahead)\t%s\t\n", lat, y, met(y > 1))
	}
	tw.Flush()

	var notes []string
	for _, r := range results {
		for _, n := range r.notes {
			notes = append(notes, r.harness+": "+n)
		}
	}
	if len(notes) > 0 {
		fmt.Fprintln(w)
		for _, n := range notes {
			fmt.Fprintln(w, "note:", n)
		}
	}
	fmt.Fprintf(w, "\nload after the run: %s\n", loadAfter)
	if machine.Busy(loadAfter) {
		fmt.Fprintf(w, "note: the 1-minute load average exceeds the %d CPUs; other work shares the machine, so the figures are inflated and the ratios noisy\n", h.cpus)
	}
}

func met(ok bool) string {
	if ok {
		return "yes"
	}
	return "NO"
}

func secs(d time.Duration) string { return fmt.Sprintf("%.2f s", d.Seconds()) }

func msec(d time.Duration) string {
	return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond))
}
