package docker

import (
	"archive/tar"
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/client"

	"evals.si/sandbox"
)

func imageRemoveOptions() image.RemoveOptions { return image.RemoveOptions{PruneChildren: true} }

// hostDirs are the host directories the host-system image binds read-only.
var hostDirs = []string{"/usr", "/etc", "/lib", "/lib32", "/lib64", "/libx32", "/bin"}

// image picks or builds the image a sandbox starts from, returning it and,
// for the host-system image, the host directories to bind.
func (r *Rung) image(ctx context.Context, cli *client.Client, cfg sandbox.Config) (string, []string, error) {
	top := -1
	for i, l := range cfg.Layers {
		if l.Ref != "" {
			top = i
			break
		}
		if l.Dir == "" {
			return "", nil, fmt.Errorf("layer %d is empty", i)
		}
	}
	var base string
	var binds []string
	var err error
	above := cfg.Layers
	switch {
	case top >= 0:
		base = cfg.Layers[top].Ref
		above = cfg.Layers[:top]
		if _, err := cli.ImageInspect(ctx, base); err != nil {
			return "", nil, fmt.Errorf("snapshot image %s: %w", short(base), err)
		}
		if cfg.Root == "" && cfg.Image == "" {
			binds, err = hostSysBinds()
		}
	case cfg.Image != "" && r.hasImage(ctx, cli, cfg.Image):
		base = cfg.Image
	case cfg.Root != "":
		base, err = importRoot(ctx, cli, cfg.Root)
	case cfg.Image != "":
		return "", nil, fmt.Errorf("image %s is not in the docker daemon and no unpacked root was given", cfg.Image)
	default:
		base, binds, err = hostSysImage(ctx, cli)
	}
	if err != nil {
		return "", nil, err
	}
	// Directory layers, bottom first, each committed over the previous.
	for i := len(above) - 1; i >= 0; i-- {
		pr, pw := io.Pipe()
		go func(dir string) { pw.CloseWithError(writeTar(pw, dir, true)) }(above[i].Dir)
		base, err = commitWith(ctx, cli, base, "/", pr)
		pr.Close()
		if err != nil {
			return "", nil, fmt.Errorf("applying layer %s: %w", above[i].Dir, err)
		}
	}
	return base, binds, nil
}

func (r *Rung) hasImage(ctx context.Context, cli *client.Client, ref string) bool {
	_, err := cli.ImageInspect(ctx, ref)
	return err == nil
}

// hostSysBinds lists the host directories (not symlinks) to bind.
func hostSysBinds() ([]string, error) {
	var binds []string
	for _, d := range hostDirs {
		fi, err := os.Lstat(d)
		if err != nil || fi.Mode()&fs.ModeSymlink != 0 || !fi.IsDir() {
			continue
		}
		binds = append(binds, d)
	}
	return binds, nil
}

// hostSysImage imports (once) an image holding the mountpoints and the
// host's symlinks for its system directories.
func hostSysImage(ctx context.Context, cli *client.Client) (string, []string, error) {
	binds, err := hostSysBinds()
	if err != nil {
		return "", nil, err
	}
	type entry struct{ name, link string }
	var ents []entry
	for _, d := range []string{"tmp", "proc", "dev", "sys", "sbin", "root", "var", "var/tmp"} {
		ents = append(ents, entry{name: d})
	}
	for _, d := range hostDirs {
		fi, err := os.Lstat(d)
		if err != nil {
			continue
		}
		if fi.Mode()&fs.ModeSymlink != 0 {
			link, err := os.Readlink(d)
			if err != nil {
				return "", nil, err
			}
			ents = append(ents, entry{name: strings.TrimPrefix(d, "/"), link: link})
		} else if fi.IsDir() {
			ents = append(ents, entry{name: strings.TrimPrefix(d, "/")})
		}
	}
	h := sha256.New()
	fmt.Fprintln(h, "evalsi-hostsys-v1")
	for _, e := range ents {
		fmt.Fprintln(h, e.name, e.link)
	}
	tag := "evalsi-hostsys:" + hex.EncodeToString(h.Sum(nil))[:24]
	if inspect, err := cli.ImageInspect(ctx, tag); err == nil {
		return inspect.ID, binds, nil
	}
	pr, pw := io.Pipe()
	go func() {
		tw := tar.NewWriter(pw)
		for _, e := range ents {
			hdr := &tar.Header{Name: e.name + "/", Typeflag: tar.TypeDir, Mode: 0o755}
			if e.name == "tmp" || e.name == "var/tmp" {
				hdr.Mode = 0o1777
			}
			if e.link != "" {
				hdr = &tar.Header{Name: e.name, Typeflag: tar.TypeSymlink, Linkname: e.link, Mode: 0o777}
			}
			if err := tw.WriteHeader(hdr); err != nil {
				pw.CloseWithError(err)
				return
			}
		}
		pw.CloseWithError(tw.Close())
	}()
	id, err := importTar(ctx, cli, pr, tag)
	return id, binds, err
}

// importRoot imports an unpacked root, cached by a key over its file list.
func importRoot(ctx context.Context, cli *client.Client, root string) (string, error) {
	key, err := rootKey(root)
	if err != nil {
		return "", fmt.Errorf("reading image root %s: %w", root, err)
	}
	tag := "evalsi-root:" + key
	if inspect, err := cli.ImageInspect(ctx, tag); err == nil {
		return inspect.ID, nil
	}
	pr, pw := io.Pipe()
	go func() { pw.CloseWithError(writeTar(pw, root, false)) }()
	id, err := importTar(ctx, cli, pr, tag)
	if err != nil {
		return "", fmt.Errorf("importing image root %s: %w", root, err)
	}
	return id, nil
}

// rootKey digests every entry's path, mode, size, mtime and link target:
// any change to the root gives a new key without hashing file contents.
func rootKey(root string) (string, error) {
	h := sha256.New()
	fmt.Fprintln(h, "evalsi-root-v1", root)
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		link := ""
		if fi.Mode()&fs.ModeSymlink != 0 {
			link, _ = os.Readlink(p)
		}
		rel, _ := filepath.Rel(root, p)
		fmt.Fprintf(h, "%s\x00%o\x00%d\x00%d\x00%s\n", rel, fi.Mode(), fi.Size(), fi.ModTime().UnixNano(), link)
		return nil
	})
	if err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil))[:32], nil
}

// importTar imports a root filesystem tar as an image and returns its ID.
func importTar(ctx context.Context, cli *client.Client, r io.Reader, tag string) (string, error) {
	rc, err := cli.ImageImport(ctx, image.ImportSource{Source: r, SourceName: "-"}, tag, image.ImportOptions{Message: "evalsi"})
	if err != nil {
		return "", fmt.Errorf("docker import %s: %w", tag, err)
	}
	defer rc.Close()
	sc := bufio.NewScanner(rc)
	for sc.Scan() {
		var msg struct {
			Status      string `json:"status"`
			ErrorDetail *struct {
				Message string `json:"message"`
			} `json:"errorDetail"`
		}
		if json.Unmarshal(sc.Bytes(), &msg) == nil && msg.ErrorDetail != nil {
			return "", fmt.Errorf("docker import %s: %s", tag, msg.ErrorDetail.Message)
		}
	}
	if err := sc.Err(); err != nil {
		return "", fmt.Errorf("docker import %s: %w", tag, err)
	}
	inspect, err := cli.ImageInspect(ctx, tag)
	if err != nil {
		return "", fmt.Errorf("docker import %s: inspecting result: %w", tag, err)
	}
	return inspect.ID, nil
}

// writeTar writes dir's tree as a tar with root-relative names, keeping
// owners, modes, symlinks and hard links. skipWhiteouts drops overlay
// whiteouts (0/0 character devices).
func writeTar(w io.Writer, dir string, skipWhiteouts bool) error {
	tw := tar.NewWriter(w)
	inodes := map[uint64]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil || rel == "." {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		st, _ := fi.Sys().(*syscall.Stat_t)
		if fi.Mode()&fs.ModeSocket != 0 {
			return nil
		}
		if skipWhiteouts && fi.Mode()&fs.ModeCharDevice != 0 && st != nil && st.Rdev == 0 {
			return nil
		}
		link := ""
		if fi.Mode()&fs.ModeSymlink != 0 {
			if link, err = os.Readlink(p); err != nil {
				return err
			}
		}
		hdr, err := tar.FileInfoHeader(fi, link)
		if err != nil {
			return err
		}
		hdr.Name = filepath.ToSlash(rel)
		if fi.IsDir() {
			hdr.Name += "/"
		}
		hdr.Uname, hdr.Gname = "", ""
		if st != nil {
			hdr.Uid, hdr.Gid = int(st.Uid), int(st.Gid)
			if fi.Mode().IsRegular() && st.Nlink > 1 {
				if first, ok := inodes[st.Ino]; ok {
					hdr.Typeflag, hdr.Linkname, hdr.Size = tar.TypeLink, first, 0
					return tw.WriteHeader(hdr)
				}
				inodes[st.Ino] = hdr.Name
			}
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if fi.Mode().IsRegular() {
			f, err := os.Open(p)
			if err != nil {
				return err
			}
			_, err = io.Copy(tw, f)
			f.Close()
			return err
		}
		return nil
	})
	if err != nil {
		return err
	}
	return tw.Close()
}
