package main

import (
	"strings"
	"testing"
	"time"
)

func TestParseCPULine(t *testing.T) {
	for _, c := range []struct {
		line   string
		want   cpuTimes
		errHas string
	}{
		{line: "cpu  100 5 50 800 10 0 5 30 7 0", want: cpuTimes{steal: 30, total: 1000}},
		{line: "cpu  1 2 3 4 5 6 7 8", want: cpuTimes{steal: 8, total: 36}},
		{line: "cpu0 1 2 3 4 5 6 7 8", errHas: "is not \"cpu\""},
		{line: "cpu 1 2 3", errHas: "8 counters"},
		{line: "cpu 1 2 3 4 5 6 7 x", errHas: "counter 8"},
	} {
		got, err := parseCPULine(c.line)
		if c.errHas != "" {
			if err == nil || !strings.Contains(err.Error(), c.errHas) {
				t.Errorf("parseCPULine(%q) error %v, want one saying %q", c.line, err, c.errHas)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("parseCPULine(%q) = %+v, %v, want %+v", c.line, got, err, c.want)
		}
	}
}

func TestStealShare(t *testing.T) {
	for _, c := range []struct {
		a, b   cpuTimes
		want   float64
		wantOK bool
	}{
		{a: cpuTimes{steal: 10, total: 1000}, b: cpuTimes{steal: 60, total: 1200}, want: 0.25, wantOK: true},
		{a: cpuTimes{steal: 10, total: 1000}, b: cpuTimes{steal: 10, total: 1100}, want: 0, wantOK: true},
		{a: cpuTimes{steal: 10, total: 1000}, b: cpuTimes{steal: 10, total: 1000}, wantOK: false},
	} {
		got, ok := stealShare(c.a, c.b)
		if ok != c.wantOK || got != c.want {
			t.Errorf("stealShare(%+v, %+v) = %v, %v, want %v, %v", c.a, c.b, got, ok, c.want, c.wantOK)
		}
	}
}

func TestRatioRow(t *testing.T) {
	ms := func(v ...int) []time.Duration {
		var d []time.Duration
		for _, x := range v {
			d = append(d, time.Duration(x)*time.Millisecond)
		}
		return d
	}
	byName := map[string]result{
		"warm":   {name: "warm", samples: ms(8, 6, 7)},
		"bare":   {name: "bare", samples: ms(5, 4, 6)},
		"docker": {name: "docker", samples: ms(350, 300)},
		"gone":   {name: "gone", skipped: "docker: not running"},
	}
	atMost := func(x float64) bool { return x <= 1.5 }
	for _, c := range []struct {
		q    ratio
		want string
	}{
		// medians 7/5, minimums 6/4.
		{ratio{"warm / bare", "warm", "bare", "≤ 1.5×", atMost}, "warm / bare\t1.40×\t1.50×\t≤ 1.5×\tyes\t"},
		{ratio{"docker / warm", "docker", "warm", "≥ 30×", func(x float64) bool { return x >= 30 }}, "docker / warm\t46.43×\t50.00×\t≥ 30×\tyes\t"},
		{ratio{"bare / warm", "bare", "warm", "≤ 1.5×", func(x float64) bool { return x >= 1 }}, "bare / warm\t0.71×\t0.67×\t≤ 1.5×\tno\t"},
		{ratio{"warm / bare", "warm", "bare", "", nil}, "warm / bare\t1.40×\t1.50×\t\t(informational)\t"},
		{ratio{"gone / bare", "gone", "bare", "≥ 30×", atMost}, "gone / bare\tnot measured\t\t≥ 30×\t\t"},
		{ratio{"missing / bare", "missing", "bare", "", nil}, "missing / bare\tnot measured\t\t\t\t"},
	} {
		if got := c.q.row(byName); got != c.want {
			t.Errorf("row %q = %q, want %q", c.q.label, got, c.want)
		}
	}
}
