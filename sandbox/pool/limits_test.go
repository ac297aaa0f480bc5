package pool

import (
	"strings"
	"testing"
	"time"

	"evals.si/sandbox/pool/wire"
)

// The rules by which the pool bounds what a client asks: over a maximum is
// refused naming the limit, the value, the maximum and the flag; zero gets
// the default, else the maximum (command_timeout keeps the rungs' own
// default when the maximum is longer); cgroup off is refused under a
// cgroup-enforced maximum.
func TestLimitsApply(t *testing.T) {
	bounded := Limits{Max: wire.LimitValues{MemoryMB: 1024, PidsMax: 128, CPUs: 2, DiskMB: 512, FileSizeMB: 64, CommandTimeout: time.Hour}}
	withDefaults := bounded
	withDefaults.Default = wire.LimitValues{MemoryMB: 256, CommandTimeout: 90 * time.Second}
	short := Limits{Max: wire.LimitValues{CommandTimeout: 30 * time.Second}}
	for _, tc := range []struct {
		name   string
		l      Limits
		asked  wire.LimitValues
		cgroup string
		want   wire.LimitValues
		notes  []string // each must be in a note
		err    []string // each must be in the error
	}{
		{name: "no bounds: what was asked", asked: wire.LimitValues{MemoryMB: 1 << 20}, cgroup: "off", want: wire.LimitValues{MemoryMB: 1 << 20}},
		{name: "within every max", l: bounded, asked: wire.LimitValues{MemoryMB: 100, PidsMax: 10, CPUs: 0.5, DiskMB: 10, FileSizeMB: 1, CommandTimeout: time.Minute},
			want: wire.LimitValues{MemoryMB: 100, PidsMax: 10, CPUs: 0.5, DiskMB: 10, FileSizeMB: 1, CommandTimeout: time.Minute}},
		{name: "at the max", l: bounded, asked: bounded.Max, want: bounded.Max},
		{name: "zero gets the max, command timeout the rungs' default", l: bounded,
			want:  wire.LimitValues{MemoryMB: 1024, PidsMax: 128, CPUs: 2, DiskMB: 512, FileSizeMB: 64},
			notes: []string{"memory_mb=1024: the sandbox pool's maximum", "pids_max=128", "cpus=2", "disk_mb=512", "file_size_mb=64"}},
		{name: "zero gets a max timeout shorter than the rungs' default", l: short,
			want: wire.LimitValues{CommandTimeout: 30 * time.Second}, notes: []string{"command_timeout=30s: the sandbox pool's maximum"}},
		{name: "zero gets the default", l: withDefaults,
			want:  wire.LimitValues{MemoryMB: 256, PidsMax: 128, CPUs: 2, DiskMB: 512, FileSizeMB: 64, CommandTimeout: 90 * time.Second},
			notes: []string{"memory_mb=256: the sandbox pool's default", "command_timeout=1m30s: the sandbox pool's default"}},
		{name: "memory over", l: bounded, asked: wire.LimitValues{MemoryMB: 4096}, err: []string{"memory_mb 4096", "maximum of 1024", "--max-memory-mb", "environment.sandbox.memory_mb"}},
		{name: "pids over", l: bounded, asked: wire.LimitValues{PidsMax: 129}, err: []string{"pids_max 129", "maximum of 128", "--max-pids"}},
		{name: "cpus over", l: bounded, asked: wire.LimitValues{CPUs: 2.5}, err: []string{"cpus 2.5", "maximum of 2", "--max-cpus", "cgroup_cpus"}},
		{name: "disk over", l: bounded, asked: wire.LimitValues{DiskMB: 513}, err: []string{"disk_mb 513", "--max-disk-mb"}},
		{name: "file size over", l: bounded, asked: wire.LimitValues{FileSizeMB: 65}, err: []string{"file_size_mb 65", "--max-file-size-mb"}},
		{name: "timeout over", l: bounded, asked: wire.LimitValues{CommandTimeout: 2 * time.Hour}, err: []string{"command_timeout 2h0m0s", "maximum of 1h0m0s", "--max-command-timeout", "environment.command_timeout"}},
		{name: "negative", l: bounded, asked: wire.LimitValues{PidsMax: -1}, err: []string{"pids_max -1", "0 or more"}},
		{name: "cgroup off under a cgroup max", l: bounded, cgroup: "off", err: []string{"cgroup off", "memory_mb, pids_max, cpus", "cgroups"}},
		{name: "cgroup off under a timeout max only", l: short, cgroup: "off", want: wire.LimitValues{CommandTimeout: 30 * time.Second}, notes: []string{"command_timeout=30s"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, notes, err := tc.l.apply(tc.asked, tc.cgroup)
			if len(tc.err) > 0 {
				if err == nil {
					t.Fatalf("applied as %+v; want a refusal", got)
				}
				for _, w := range tc.err {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("the refusal %q does not say %q", err, w)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("applied %+v; want %+v", got, tc.want)
			}
			all := strings.Join(notes, "\n")
			for _, w := range tc.notes {
				if !strings.Contains(all, w) {
					t.Errorf("notes %q do not say %q", notes, w)
				}
			}
			if len(tc.notes) == 0 && len(notes) > 0 {
				t.Errorf("notes %q for limits the client chose", notes)
			}
		})
	}
}

// A pool refuses limits it could not hold to: negative, a default over
// its max, or a bound on a limit its rung does not enforce.
func TestLimitsCheck(t *testing.T) {
	all := []string{"memory_mb", "pids_max", "file_size_mb", "cpus", "disk_mb", "command_timeout"}
	noPids := []string{"memory_mb", "file_size_mb", "cpus", "disk_mb", "command_timeout"}
	for _, tc := range []struct {
		name     string
		l        Limits
		enforced []string
		err      string // "" is accepted
	}{
		{"none", Limits{}, noPids, ""},
		{"every max", Limits{Max: wire.LimitValues{MemoryMB: 1, PidsMax: 1, CPUs: 1, DiskMB: 1, FileSizeMB: 1, CommandTimeout: time.Second}}, all, ""},
		{"a default without a max", Limits{Default: wire.LimitValues{MemoryMB: 512}}, all, ""},
		{"negative max", Limits{Max: wire.LimitValues{CPUs: -1}}, all, "--max-cpus"},
		{"default over max", Limits{Max: wire.LimitValues{MemoryMB: 256}, Default: wire.LimitValues{MemoryMB: 512}}, all, "default 512 is over the maximum 256"},
		{"a max the rung does not enforce", Limits{Max: wire.LimitValues{PidsMax: 64}}, noPids, "does not enforce it"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.l.check("test", tc.enforced)
			switch {
			case tc.err == "" && err != nil:
				t.Errorf("refused: %v", err)
			case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
				t.Errorf("check: %v; want an error saying %q", err, tc.err)
			}
		})
	}
}

// A command's own timeout is bounded by the max; zero stays the sandbox's.
func TestLimitsExecTimeout(t *testing.T) {
	l := Limits{Max: wire.LimitValues{CommandTimeout: time.Minute}}
	for _, tc := range []struct{ in, want time.Duration }{{0, 0}, {time.Second, time.Second}, {time.Minute, time.Minute}, {time.Hour, time.Minute}} {
		if got := l.execTimeout(tc.in); got != tc.want {
			t.Errorf("exec timeout %s under a max of a minute: %s; want %s", tc.in, got, tc.want)
		}
	}
	if got := (Limits{}).execTimeout(time.Hour); got != time.Hour {
		t.Errorf("exec timeout without a max: %s", got)
	}
}
