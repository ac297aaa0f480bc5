package kubetest

import (
	"archive/tar"
	"context"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"syscall"
	"testing"

	"github.com/distribution/reference"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// ImportImage makes an image named ref (e.g. "evalsi.test/base:1") from a
// root filesystem directory and imports it into the node's containerd (pods
// use imagePullPolicy: Never). Needs Options.Node.
func (c *Cluster) ImportImage(t testing.TB, ref, rootfs string) {
	t.Helper()
	if c.node == nil {
		t.Fatal("kubetest: ImportImage needs a node: call Shared(t, kubetest.Options{Node: true})")
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	if err := c.importImage(ctx, ref, rootfs, nil); err != nil {
		t.Fatalf("importing image %s from %s: %v", ref, rootfs, err)
	}
}

// importImage wraps rootfs, as one layer, into an OCI layout tarball and
// imports it with ctr into the k8s.io namespace, where the kubelet's images
// live.
func (c *Cluster) importImage(ctx context.Context, ref, rootfs string, entrypoint []string) error {
	named, err := reference.ParseNormalizedNamed(ref)
	if err != nil {
		return fmt.Errorf("image reference %q: %w", ref, err)
	}
	named = reference.TagNameOnly(named)
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		pr, pw := io.Pipe()
		go func() { pw.CloseWithError(tarDir(pw, rootfs)) }()
		return pr, nil
	})
	if err != nil {
		return fmt.Errorf("making a layer of %s: %w", rootfs, err)
	}
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		return err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", runtime.GOARCH
	cf.Config.Entrypoint = entrypoint
	cf.Config.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		return err
	}
	work, err := os.MkdirTemp(filepath.Join(c.node.dir, "images"), "import-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	lp, err := layout.Write(filepath.Join(work, "layout"), empty.Index)
	if err != nil {
		return err
	}
	if err := lp.AppendImage(img,
		layout.WithAnnotations(map[string]string{
			"io.containerd.image.name":          named.String(),
			"org.opencontainers.image.ref.name": named.String(),
		}),
		layout.WithPlatform(v1.Platform{OS: "linux", Architecture: runtime.GOARCH})); err != nil {
		return fmt.Errorf("writing the image's OCI layout: %w", err)
	}
	archive := filepath.Join(work, "image.tar")
	f, err := os.Create(archive)
	if err != nil {
		return err
	}
	if err := tarDir(f, filepath.Join(work, "layout")); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return run(ctx, "ctr", "-n", "k8s.io", "--address", c.node.socket, "images", "import", archive)
}

// tarDir writes the tree at root as a tar stream: files, directories and
// symbolic links with their modes, owned by root.
func tarDir(w io.Writer, root string) error {
	tw := tar.NewWriter(w)
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, path)
		if err != nil || rel == "." {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		if info.Mode()&fs.ModeSocket != 0 {
			return nil // a socket is made by whoever listens on it, and tar has no type for it
		}
		link := ""
		if info.Mode()&fs.ModeSymlink != 0 {
			if link, err = os.Readlink(path); err != nil {
				return err
			}
		}
		hdr, err := tar.FileInfoHeader(info, link)
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		hdr.Name = filepath.ToSlash(rel)
		if info.IsDir() {
			hdr.Name += "/"
		}
		hdr.Uid, hdr.Gid, hdr.Uname, hdr.Gname = 0, 0, "", ""
		if st, ok := info.Sys().(*syscall.Stat_t); ok && os.Geteuid() == 0 {
			hdr.Uid, hdr.Gid = int(st.Uid), int(st.Gid)
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if !info.Mode().IsRegular() {
			return nil
		}
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		_, err = io.Copy(tw, f)
		return err
	})
	if err != nil {
		return fmt.Errorf("archiving %s: %w", root, err)
	}
	return tw.Close()
}
