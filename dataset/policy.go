package dataset

import (
	"encoding/json"
	"fmt"
	"maps"
	"net"
	"reflect"
	"slices"
	"strings"

	"evals.si/spec"
)

// LooserError is a record whose metadata.environment asks for a weaker
// sandbox policy than the spec's environment: the spec file's author
// decides the weakest policy, a record may only tighten it. Running the
// record would not help (it is refused the same way every time).
type LooserError struct {
	Record string
	Fields []LooserField
}

// LooserField is one field a record loosens.
type LooserField struct {
	// Field is the path under environment, e.g. "sandbox.network".
	Field string
	// Want is what the record asks for, Spec what the spec allows.
	Want, Spec string
}

func (e *LooserError) Error() string {
	parts := make([]string, len(e.Fields))
	for i, f := range e.Fields {
		parts[i] = fmt.Sprintf("%s: %s is looser than the spec's %s", f.Field, f.Want, f.Spec)
	}
	return fmt.Sprintf("record %q metadata.environment asks for a weaker sandbox than the spec allows (%s); a record may only tighten the spec's environment: loosen it in the spec file if you mean it, or remove the field from the record",
		e.Record, strings.Join(parts, "; "))
}

// networkRank orders network modes from tightest to loosest.
var networkRank = map[string]int{"deny": 0, "allowlist": 1, "allow": 2}

// Looser lists the fields in which env's sandbox policy is weaker than
// base's, both with defaults applied (base nil: the defaults). Looser is:
// a wider network (deny < allowlist < allow) or allow_hosts beyond the
// spec's list, for the agent's phase (sandbox.network) and the checker's
// (checker.network, else sandbox.network, against the spec's checker's,
// else the spec's sandbox.network); setup_network allow over deny; a larger limit, or none
// where the spec has one (memory_mb, pids_max, file_size_mb, disk_mb,
// cgroup_cpus, command_timeout); read_only_root turned off; a lower
// min_isolation; a ladder with a rung the spec's ladder lacks or in
// another order (so never the host rung unless the spec lists it);
// allow_unsafe_host the spec does not set; image_signatures removed, with
// other keys, or allow_local added; and any other cgroup or firecracker
// settings, which are the machine's, not the task's. Image, files, setup,
// env, workdir, users, service and the checker's other fields are what
// records are for and may differ.
func Looser(base, env *spec.Environment) []LooserField {
	if env == nil {
		return nil
	}
	b := &spec.Environment{}
	if base != nil {
		b = base
	}
	eff := func(e *spec.Environment) (*spec.Environment, *spec.SandboxPolicy) {
		c := *e
		c.Checker = nil // ApplyDefaults would fill in the shared checker
		sb := spec.SandboxPolicy{}
		if e.Sandbox != nil {
			sb = *e.Sandbox
		}
		c.Sandbox = &sb
		c.ApplyDefaults() // a shallow copy: defaults fill only empty fields
		return &c, c.Sandbox
	}
	be, bs := eff(b)
	ee, es := eff(env)
	var out []LooserField
	add := func(field string, want, spec any) {
		out = append(out, LooserField{Field: field, Want: fmt.Sprint(want), Spec: fmt.Sprint(spec)})
	}

	// phaseNetwork compares one phase's network with the spec's for it.
	phaseNetwork := func(prefix string, want, have phaseNet) {
		if networkRank[want.mode] > networkRank[have.mode] {
			add(prefix+".network", want.mode, have.mode)
		} else if want.mode == "allowlist" && have.mode == "allowlist" {
			for _, h := range want.hosts {
				if !slices.ContainsFunc(have.hosts, func(s string) bool { return sameHost(s, h) }) {
					add(prefix+".allow_hosts", h, "["+strings.Join(have.hosts, ", ")+"]")
				}
			}
		} else if want.mode == "allowlist" && have.mode == "allow" {
			// allow refuses this machine's own addresses; an allowlist
			// naming one would reach what the spec's author kept out.
			for _, h := range want.hosts {
				if ownMachine(h) {
					add(prefix+".allow_hosts", h, "allow (which refuses this machine's own addresses)")
				}
			}
		}
	}
	phaseNetwork("sandbox", phaseNet{es.Network, es.AllowHosts}, phaseNet{bs.Network, bs.AllowHosts})
	// The checker's phase has its own network (checker.network, else the
	// sandbox's); its ceiling is the spec's checker's.
	if env.Checker != nil {
		phaseNetwork("checker", checkerNetwork(env.Checker, es), checkerNetwork(b.Checker, bs))
	}
	if ee.SetupNetwork == "allow" && be.SetupNetwork != "allow" {
		add("setup_network", ee.SetupNetwork, be.SetupNetwork)
	}
	limit := func(field string, want, have float64) {
		if have > 0 && (want <= 0 || want > have) {
			w := fmt.Sprint(want)
			if want <= 0 {
				w = "no limit"
			}
			add(field, w, have)
		}
	}
	limit("sandbox.memory_mb", float64(es.MemoryMB), float64(bs.MemoryMB))
	limit("sandbox.pids_max", float64(es.PidsMax), float64(bs.PidsMax))
	limit("sandbox.file_size_mb", float64(es.FileSizeMB), float64(bs.FileSizeMB))
	limit("sandbox.disk_mb", float64(es.DiskMB), float64(bs.DiskMB))
	limit("sandbox.cgroup_cpus", es.CgroupCPUs, bs.CgroupCPUs)
	if w, h := ee.CommandTimeout.D(), be.CommandTimeout.D(); h > 0 && (w <= 0 || w > h) {
		add("command_timeout", w, h)
	}
	if bs.ReadOnlyRoot && !es.ReadOnlyRoot {
		add("sandbox.read_only_root", false, true)
	}
	if isolationRank(es.MinIsolation) < isolationRank(bs.MinIsolation) {
		add("sandbox.min_isolation", orNone(es.MinIsolation), bs.MinIsolation)
	}
	if !subsequence(es.Ladder, bs.Ladder) {
		add("sandbox.ladder", "["+strings.Join(es.Ladder, ", ")+"]", "["+strings.Join(bs.Ladder, ", ")+"] (a record may drop rungs, not add or reorder them)")
	}
	if es.AllowUnsafeHost && !bs.AllowUnsafeHost {
		add("sandbox.allow_unsafe_host", true, "false (only the spec file may set it)")
	}
	if bsig := bs.ImageSignatures; bsig != nil && len(bsig.Keys) > 0 {
		esig := es.ImageSignatures
		switch {
		case esig == nil || len(esig.Keys) == 0:
			add("sandbox.image_signatures", "none", "signed images only")
		case !sameKeys(esig.Keys, bsig.Keys):
			add("sandbox.image_signatures.keys", "other keys", "the spec's keys")
		case esig.AllowLocal && !bsig.AllowLocal:
			add("sandbox.image_signatures.allow_local", true, false)
		}
	}
	if es.Cgroup != bs.Cgroup {
		add("sandbox.cgroup", es.Cgroup, bs.Cgroup+" (the machine's setting, not a task's)")
	}
	if !reflect.DeepEqual(es.Firecracker, bs.Firecracker) {
		add("sandbox.firecracker", "other settings", "the spec's (the machine's settings, not a task's)")
	}
	if !reflect.DeepEqual(es.QEMU, bs.QEMU) {
		add("sandbox.qemu", "other settings", "the spec's (the machine's settings, not a task's)")
	}
	return out
}

// phaseNet is one phase's network mode and allowlist.
type phaseNet struct {
	mode  string
	hosts []string
}

// checkerNetwork is the checker's phase's network: checker.network when
// set, else the sandbox's (sb, defaults applied).
func checkerNetwork(c *spec.Checker, sb *spec.SandboxPolicy) phaseNet {
	if c != nil && c.Network != "" {
		return phaseNet{c.Network, c.AllowHosts}
	}
	return phaseNet{sb.Network, sb.AllowHosts}
}

func isolationRank(level string) int {
	if level == "" {
		return -1
	}
	return slices.Index(spec.IsolationLevels(), level)
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

// subsequence reports whether every rung of sub is in full, in full's order.
func subsequence(sub, full []string) bool {
	i := 0
	for _, r := range sub {
		j := slices.Index(full[i:], r)
		if j < 0 {
			return false
		}
		i += j + 1
	}
	return true
}

// ownMachine reports whether an allow_hosts entry (host:port) names the
// engine's own machine: localhost, a loopback, unspecified, link-local or
// multicast address, or an address of one of its interfaces.
func ownMachine(hostPort string) bool {
	host, _, err := net.SplitHostPort(hostPort)
	if err != nil {
		host = hostPort
	}
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	if host == "localhost" || strings.HasSuffix(host, ".localhost") {
		return true
	}
	ip := net.ParseIP(host)
	if ip == nil {
		return false // a name: the allowlist proxy refuses names resolving to non-public addresses
	}
	if ip.IsLoopback() || ip.IsUnspecified() || ip.IsLinkLocalUnicast() || ip.IsMulticast() {
		return true
	}
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return true // cannot tell: refuse
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.Equal(ip) {
			return true
		}
	}
	return false
}

func sameHost(a, b string) bool {
	norm := func(s string) string { return strings.ToLower(strings.Replace(s, ".:", ":", 1)) }
	return norm(a) == norm(b)
}

func sameKeys(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}

// CapNetworkAndLimits tightens what rec's metadata.environment asks for
// beyond base in the fields a benchmark importer translates from the
// task's own configuration (network and allow_hosts, the checker's too,
// setup_network, the
// numeric limits, command_timeout) down to base's, and returns the record
// so changed with the fields it capped. For records an importer made, the
// task's settings are requests and the spec's author has the last word;
// any other loosening is left for Environment to refuse. rec is not
// modified.
func CapNetworkAndLimits(base *spec.Environment, rec spec.Record) (spec.Record, []LooserField, error) {
	env, err := merged(base, rec)
	if err != nil || env == base {
		return rec, nil, err
	}
	fields := Looser(base, env)
	if len(fields) == 0 {
		return rec, nil, nil
	}
	var over map[string]any
	if err := decodeJSON(rec.Metadata["environment"], &over); err != nil {
		return rec, nil, fmt.Errorf("%s: %w", overrideName(rec), err)
	}
	b := &spec.Environment{}
	if base != nil {
		b = base
	}
	bs := b.Sandbox
	if bs == nil {
		bs = &spec.SandboxPolicy{}
	}
	sb, _ := over["sandbox"].(map[string]any)
	if sb == nil {
		sb = map[string]any{}
	}
	// A field deleted from the override is the spec's again once merged.
	var capped []LooserField
	for _, f := range fields {
		switch f.Field {
		case "sandbox.network", "sandbox.allow_hosts":
			delete(sb, "network")
			delete(sb, "allow_hosts")
			if f.Field == "sandbox.allow_hosts" && env.Sandbox != nil {
				// Keep the hosts the spec allows, if any.
				var keep []any
				for _, h := range env.Sandbox.AllowHosts {
					if slices.ContainsFunc(bs.AllowHosts, func(s string) bool { return sameHost(s, h) }) {
						keep = append(keep, h)
					}
				}
				if len(keep) > 0 {
					sb["allow_hosts"] = keep
				} else {
					sb["network"], sb["allow_hosts"] = "deny", nil
				}
			}
		case "checker.network", "checker.allow_hosts":
			// Back to the spec's checker's network, else the (capped)
			// sandbox's; an allowlist keeps the hosts the spec's allows.
			ck, _ := over["checker"].(map[string]any)
			if ck == nil {
				ck = map[string]any{}
			}
			delete(ck, "network")
			delete(ck, "allow_hosts")
			if f.Field == "checker.allow_hosts" && env.Checker != nil {
				have := checkerNetwork(b.Checker, bs)
				var keep []any
				for _, h := range env.Checker.AllowHosts {
					if slices.ContainsFunc(have.hosts, func(s string) bool { return sameHost(s, h) }) {
						keep = append(keep, h)
					}
				}
				if len(keep) > 0 {
					ck["network"], ck["allow_hosts"] = "allowlist", keep
				} else {
					ck["network"], ck["allow_hosts"] = "deny", nil
				}
			}
			if len(ck) > 0 {
				over["checker"] = ck
			} else {
				delete(over, "checker")
			}
		case "setup_network":
			delete(over, "setup_network")
		case "command_timeout":
			delete(over, "command_timeout")
		case "sandbox.memory_mb", "sandbox.pids_max", "sandbox.file_size_mb", "sandbox.disk_mb", "sandbox.cgroup_cpus":
			delete(sb, strings.TrimPrefix(f.Field, "sandbox."))
		default:
			continue
		}
		capped = append(capped, f)
	}
	if len(sb) > 0 {
		over["sandbox"] = sb
	} else {
		delete(over, "sandbox")
	}
	nb, err := json.Marshal(over)
	if err != nil {
		return rec, nil, fmt.Errorf("%s: %w", overrideName(rec), err)
	}
	out := rec
	out.Metadata = maps.Clone(rec.Metadata)
	out.Metadata["environment"] = spec.JSON(nb)
	return out, capped, nil
}
