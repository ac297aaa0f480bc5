package main

import (
	"debug/elf"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
)

// libDirs are searched, in order, for the libraries a host binary needs.
var libDirs = []string{
	"/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu",
	"/lib/aarch64-linux-gnu", "/usr/lib/aarch64-linux-gnu",
	"/lib64", "/usr/lib64", "/lib", "/usr/lib",
}

// imageRoot returns an image root of about mb MB under cacheDir, building
// it once: the host's `true` and `sh` with their loader and libraries, plus
// mb files of 1 MB of pseudo-random bytes (incompressible, never sparse).
// A marker file records that the tree is complete.
func imageRoot(cacheDir string, mb int) (string, error) {
	root := filepath.Join(cacheDir, fmt.Sprintf("root-%dMB", mb))
	marker := filepath.Join(cacheDir, fmt.Sprintf("root-%dMB.complete", mb))
	if _, err := os.Stat(marker); err == nil {
		return root, nil
	}
	fmt.Fprintf(os.Stderr, "building a %d MB image root under %s (once)\n", mb, root)
	if err := os.RemoveAll(root); err != nil {
		return "", fmt.Errorf("clearing %s: %w", root, err)
	}
	if err := buildRoot(root, mb); err != nil {
		return "", fmt.Errorf("building the %d MB image root in %s: %w", mb, root, err)
	}
	if err := os.WriteFile(marker, nil, 0o644); err != nil {
		return "", err
	}
	return root, nil
}

func buildRoot(root string, mb int) error {
	for _, d := range []string{"bin", "etc", "tmp", "workspace", "proc", "dev", "sys", "pad"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			return err
		}
	}
	if err := os.Chmod(filepath.Join(root, "tmp"), 0o1777); err != nil {
		return err
	}
	for _, bin := range []string{"/usr/bin/true", "/bin/sh"} {
		if err := copyWithLibs(root, bin); err != nil {
			return err
		}
	}
	if err := os.WriteFile(filepath.Join(root, "etc", "os-release"), []byte("ID=evalsi-bench\n"), 0o644); err != nil {
		return err
	}
	rng := rand.NewChaCha8([32]byte{'e', 'v', 'a', 'l', 's', 'i'})
	buf := make([]byte, 1<<20)
	for i := range mb {
		rng.Read(buf)
		if err := os.WriteFile(filepath.Join(root, "pad", fmt.Sprintf("%05d", i)), buf, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// copyWithLibs copies the ELF binary bin (following symlinks) into root at
// the same path, with its program interpreter and the shared libraries it
// needs, transitively.
func copyWithLibs(root, bin string) error {
	todo := []string{bin}
	seen := map[string]bool{}
	for len(todo) > 0 {
		p := todo[0]
		todo = todo[1:]
		if seen[p] {
			continue
		}
		seen[p] = true
		if err := copyFile(p, filepath.Join(root, p)); err != nil {
			return err
		}
		f, err := elf.Open(p)
		if err != nil {
			return fmt.Errorf("reading %s: %w", p, err)
		}
		for _, prog := range f.Progs {
			if prog.Type == elf.PT_INTERP {
				b := make([]byte, prog.Filesz)
				if _, err := prog.ReadAt(b, 0); err == nil {
					todo = append(todo, strings.TrimRight(string(b), "\x00"))
				}
			}
		}
		needed, err := f.ImportedLibraries()
		f.Close()
		if err != nil {
			return fmt.Errorf("reading %s's libraries: %w", p, err)
		}
		for _, lib := range needed {
			found := ""
			for _, d := range libDirs {
				if _, err := os.Stat(filepath.Join(d, lib)); err == nil {
					found = filepath.Join(d, lib)
					break
				}
			}
			if found == "" {
				return fmt.Errorf("%s needs %s, found in none of %s", p, lib, strings.Join(libDirs, ", "))
			}
			todo = append(todo, found)
		}
	}
	return nil
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	st, err := in.Stat()
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, st.Mode().Perm())
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return fmt.Errorf("copying %s: %w", src, err)
	}
	return out.Close()
}
