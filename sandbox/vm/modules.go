package vm

import (
	"bufio"
	"bytes"
	"debug/elf"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
)

// Module is a kernel module file the guest loads.
type Module struct {
	// Name is the module's name, with underscores (virtio_rng for
	// virtio-rng.ko).
	Name string
	// Path is the file's path relative to the modules directory
	// (kernel/drivers/char/hw_random/virtio-rng.ko).
	Path string
}

// moduleName normalises a module or file name: the kernel treats dashes and
// underscores in module names as the same character.
func moduleName(s string) string {
	return strings.ReplaceAll(s, "-", "_")
}

// moduleIndex is what is known about one modules directory.
type moduleIndex struct {
	dir string
	// files maps module names to their paths under dir.
	files map[string]string
	// builtin holds the names of modules built into the kernel.
	builtin map[string]bool
	// builtinAliases holds the aliases built-in modules provide
	// (modules.builtin.modinfo), for soft dependencies named by alias.
	builtinAliases map[string]bool
	// aliases maps an alias to the modules that provide it; it is read
	// only when a soft dependency names something that is not a file,
	// since that reads every module's .modinfo.
	aliases map[string][]string
	// info caches each module's .modinfo entries.
	info map[string]modinfo
}

// modinfo is the part of a module's .modinfo section dependency
// resolution needs.
type modinfo struct {
	depends []string
	// softPre are the names of its "softdep=pre:" entries: modules
	// modprobe loads first when present (ext4 names crypto-crc32c, which
	// its metadata checksums need), and which are no error when missing.
	softPre []string
	aliases []string
}

// ResolveModules returns the modules named and everything they depend on
// (their modinfo depends= and softdep pre:), from the modules directory dir
// (lib/modules/RELEASE), in an order they can be loaded in: each after its
// dependencies. A name that is neither a file under dir/kernel nor listed
// in dir/modules.builtin is an error; a module built in needs no file.
func ResolveModules(dir string, names []string) ([]Module, error) {
	ix, err := readModuleIndex(dir)
	if err != nil {
		return nil, err
	}
	var order []Module
	// state: 1 while a module's dependencies are being visited, 2 when it
	// is in order; a cycle (which the kernel's build refuses) is an error
	// rather than an endless walk.
	state := map[string]int{}
	var visit func(name, requiredBy string, soft bool) error
	visit = func(name, requiredBy string, soft bool) error {
		name = moduleName(name)
		switch state[name] {
		case 1:
			return fmt.Errorf("kernel modules under %s: %s and %s depend on each other", dir, name, requiredBy)
		case 2:
			return nil
		}
		file, ok := ix.files[name]
		if !ok {
			if ix.builtin[name] || (soft && ix.builtinAliases[name]) {
				state[name] = 2
				return nil
			}
			if soft {
				// A soft dependency may be an alias (crypto-crc32c):
				// its provider is loaded instead.
				provider, err := ix.aliasProvider(name)
				if err != nil {
					return err
				}
				if provider == "" {
					state[name] = 2
					return nil
				}
				return visit(provider, requiredBy, false)
			}
			how := "asked for"
			if requiredBy != "" {
				how = "needed by " + requiredBy
			}
			return fmt.Errorf("kernel module %s (%s) is neither a file under %s nor in its modules.builtin: use a kernel that has it (built in or as a module), or the modules directory of this kernel's build", name, how, filepath.Join(dir, "kernel"))
		}
		state[name] = 1
		info, err := ix.modinfo(name, file)
		if err != nil {
			return err
		}
		for _, d := range info.softPre {
			if err := visit(d, name, true); err != nil {
				return err
			}
		}
		for _, d := range info.depends {
			if err := visit(d, name, false); err != nil {
				return err
			}
		}
		state[name] = 2
		order = append(order, Module{Name: name, Path: file})
		return nil
	}
	for _, n := range names {
		if err := visit(n, "", false); err != nil {
			return nil, err
		}
	}
	return order, nil
}

// readModuleIndex lists the module files under dir/kernel and the built-in
// modules of dir/modules.builtin. The files are found by walking rather
// than from modules.dep, which a kernel package unpacked with dpkg-deb
// lacks (depmod writes it at install).
func readModuleIndex(dir string) (*moduleIndex, error) {
	ix := &moduleIndex{dir: dir, files: map[string]string{}, builtin: map[string]bool{},
		builtinAliases: map[string]bool{}, info: map[string]modinfo{}}
	root := filepath.Join(dir, "kernel")
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			return nil
		}
		base := d.Name()
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		switch {
		case strings.HasSuffix(base, ".ko"):
			ix.files[moduleName(strings.TrimSuffix(base, ".ko"))] = rel
		case strings.Contains(base, ".ko."):
			// Compressed modules (.ko.xz, .ko.zst) would need a
			// decompressor here and kernel support for loading them;
			// they are recorded so the error names the file.
			ix.files[moduleName(base[:strings.Index(base, ".ko.")])] = rel
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("kernel modules: reading %s: %w (the modules directory of the guest kernel, lib/modules/RELEASE)", root, err)
	}
	if err := readLines(filepath.Join(dir, "modules.builtin"), func(line string) {
		b := path.Base(line)
		ix.builtin[moduleName(strings.TrimSuffix(b, ".ko"))] = true
	}); err != nil {
		return nil, err
	}
	if data, err := os.ReadFile(filepath.Join(dir, "modules.builtin.modinfo")); err == nil {
		// Entries are NUL-separated module.key=value.
		for _, e := range bytes.Split(data, []byte{0}) {
			mod, kv, ok := strings.Cut(string(e), ".")
			if !ok {
				continue
			}
			if v, ok := strings.CutPrefix(kv, "alias="); ok {
				ix.builtinAliases[v] = true
				ix.builtinAliases[moduleName(v)] = true
			}
			ix.builtin[moduleName(mod)] = true
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("kernel modules: %w", err)
	}
	return ix, nil
}

// readLines calls f with each non-empty line of a file; a missing file has
// no lines (a kernel without modules.builtin has no built-in modules to
// list).
func readLines(name string, f func(string)) error {
	file, err := os.Open(name)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("kernel modules: %w", err)
	}
	defer file.Close()
	s := bufio.NewScanner(file)
	for s.Scan() {
		if l := strings.TrimSpace(s.Text()); l != "" {
			f(l)
		}
	}
	if err := s.Err(); err != nil {
		return fmt.Errorf("kernel modules: reading %s: %w", name, err)
	}
	return nil
}

// modinfo reads (once) the .modinfo section of the module name at file.
func (ix *moduleIndex) modinfo(name, file string) (modinfo, error) {
	if mi, ok := ix.info[name]; ok {
		return mi, nil
	}
	full := filepath.Join(ix.dir, file)
	if !strings.HasSuffix(file, ".ko") {
		return modinfo{}, fmt.Errorf("kernel module %s at %s is compressed: the guest's initramfs needs uncompressed .ko files (unpack them with xz -d or zstd -d, or use a kernel package that ships them so, as Debian's does)", name, full)
	}
	mi, err := readModinfo(full)
	if err != nil {
		return modinfo{}, err
	}
	ix.info[name] = mi
	return mi, nil
}

// readModinfo parses a module's .modinfo ELF section: NUL-separated
// key=value entries.
func readModinfo(file string) (modinfo, error) {
	f, err := elf.Open(file)
	if err != nil {
		return modinfo{}, fmt.Errorf("kernel module %s: %w (not an ELF module file)", file, err)
	}
	defer f.Close()
	sec := f.Section(".modinfo")
	if sec == nil {
		return modinfo{}, fmt.Errorf("kernel module %s has no .modinfo section (not a kernel module?)", file)
	}
	data, err := sec.Data()
	if err != nil {
		return modinfo{}, fmt.Errorf("kernel module %s: reading .modinfo: %w", file, err)
	}
	var mi modinfo
	for _, e := range bytes.Split(data, []byte{0}) {
		k, v, ok := strings.Cut(string(e), "=")
		if !ok {
			continue
		}
		switch k {
		case "depends":
			for _, d := range strings.Split(v, ",") {
				if d = strings.TrimSpace(d); d != "" {
					mi.depends = append(mi.depends, d)
				}
			}
		case "softdep":
			// "pre: a b post: c": only pre matters for load order; post
			// modules are extras modprobe adds afterwards.
			pre := false
			for _, w := range strings.Fields(v) {
				switch w {
				case "pre:":
					pre = true
				case "post:":
					pre = false
				default:
					if pre {
						mi.softPre = append(mi.softPre, w)
					}
				}
			}
		case "alias":
			mi.aliases = append(mi.aliases, v)
		}
	}
	return mi, nil
}

// aliasProvider returns the module that provides alias, or "" when none
// does. Where several do (crypto-crc32c: crc32c_generic and crc32c-intel),
// it prefers one outside kernel/arch: the generic implementation loads on
// any CPU, while an accelerated one refuses a CPU the VMM emulates without
// its instructions, which would fail the guest's boot.
func (ix *moduleIndex) aliasProvider(alias string) (string, error) {
	if ix.aliases == nil {
		ix.aliases = map[string][]string{}
		names := make([]string, 0, len(ix.files))
		for n := range ix.files {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, n := range names {
			if !strings.HasSuffix(ix.files[n], ".ko") {
				continue
			}
			mi, err := ix.modinfo(n, ix.files[n])
			if err != nil {
				return "", err
			}
			for _, a := range mi.aliases {
				ix.aliases[a] = append(ix.aliases[a], n)
			}
		}
	}
	var providers []string
	for a, ns := range ix.aliases {
		if a == alias || moduleName(a) == moduleName(alias) {
			providers = append(providers, ns...)
		} else if strings.ContainsAny(a, "*?[") {
			if ok, _ := path.Match(a, alias); ok {
				providers = append(providers, ns...)
			}
		}
	}
	if len(providers) == 0 {
		return "", nil
	}
	sort.Slice(providers, func(i, j int) bool {
		ai := strings.HasPrefix(ix.files[providers[i]], "kernel/arch/")
		aj := strings.HasPrefix(ix.files[providers[j]], "kernel/arch/")
		if ai != aj {
			return !ai
		}
		return providers[i] < providers[j]
	})
	return providers[0], nil
}
