package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"path"
	"slices"
	"strings"

	"evals.si/access"
	"evals.si/bench/bfcl"
	"evals.si/bench/taubench"
	"evals.si/dataset"
	tauharness "evals.si/harness/taubench"
	"evals.si/image"
	"evals.si/spec"
)

// What a spec submitted to a server may never do, whatever the rules say:
// read a file of the server's outside datasets_dir or of another
// project's promoted datasets; name a file on a worker (a worker's files
// hold its credentials); run model output outside a sandbox (the host
// rung); use a worker's own directories as images. The operator may open
// the last two in the server config (allow_unsafe_host,
// allow_local_images); workers must opt in to the host rung too.

// localImage reports an image reference a worker resolves from its own
// file system.
func localImage(ref string) bool {
	if ref != "" && image.IsLocal(ref) {
		return true
	}
	for _, p := range []string{"dir:", "oci-layout:", "docker-archive:", "/", "./", "../"} {
		if strings.HasPrefix(ref, p) {
			return true
		}
	}
	return false
}

// datasetFiles are the server-side files a spec's dataset names, by field.
// An opaque URI (scheme:path) names a path just as scheme://path does for
// the importers; it is read the same way here. A bfcl:// URI names its
// data_dir.
func datasetFiles(d spec.Dataset) (map[string]string, error) {
	files := map[string]string{}
	if d.Path != "" {
		files["dataset.path"] = d.Path
	}
	if d.URI != "" {
		u, err := url.Parse(d.URI)
		if err != nil {
			return nil, badRequest("spec.dataset.uri", "dataset.uri %q is not a URI", d.URI)
		}
		p := u.Host + u.Path
		if u.Opaque != "" {
			p = u.Opaque
		}
		if u.Scheme == bfcl.Scheme {
			// bfcl://CATEGORY: the path is a category, the files are
			// under data_dir. Without it the importer would read the
			// server's own BFCL_DATA_DIR.
			if p = u.Query().Get(bfcl.DataDirParam); p == "" {
				return nil, badRequest("spec.dataset.uri", "dataset.uri %q names no data_dir: on a server, give BFCL's data directory as data_dir=DIR, relative to the server's datasets_dir (the server's %s is not read)", d.URI, bfcl.DataDirEnv)
			}
		}
		if u.Scheme == taubench.Scheme {
			// taubench://DOMAIN: the files are under data_dir, and a
			// task_file stays inside the domain's directory.
			q := u.Query()
			if p = q.Get(taubench.DataDirParam); p == "" {
				return nil, badRequest("spec.dataset.uri", "dataset.uri %q names no data_dir: on a server, give tau2's data directory as data_dir=DIR, relative to the server's datasets_dir (the server's %s is not read)", d.URI, taubench.DataDirEnv)
			}
			if tf := q.Get(taubench.TaskFileParam); tf != "" && (path.IsAbs(tf) || strings.Contains(tf, "..")) {
				return nil, badRequest("spec.dataset.uri", "dataset.uri %q: task_file= must name a file inside the domain's directory (no absolute path, no ..)", d.URI)
			}
		}
		if p != "" {
			files["dataset.uri"] = p
		}
	}
	if t := d.Traces; t != nil && t.File != "" {
		files["dataset.traces.file"] = t.File
	}
	return files, nil
}

// promotedOwner is the project owning a datasets_dir path under
// promoted/<project>/ ("" for other paths).
func promotedOwner(p string) string {
	rest, ok := strings.CutPrefix(path.Clean(p), "promoted/")
	if !ok {
		return ""
	}
	owner, _, _ := strings.Cut(rest, "/")
	return owner
}

// confineSubmit checks a submitted spec against what no spec may do on a
// server, and widens the authorization resource with what mirrors make
// of its images.
func (s *Server) confineSubmit(project string, sp *spec.Spec, res *access.Resource) error {
	files, err := datasetFiles(sp.Dataset)
	if err != nil {
		return err
	}
	for field, p := range files {
		if err := s.insideDatasets(project, p); err != nil {
			return badRequest("spec."+field, "%s %q %v", field, p, err)
		}
	}
	// Everything the spec names as a path outside its dataset is a file on
	// the worker (decided by where it is named, not by its value).
	rest := *sp
	rest.Dataset = spec.Dataset{}
	if p := access.RunResource("", &rest).Paths; len(p) > 0 {
		return refused(fmt.Errorf("the spec names %q, a file on the worker; a spec run on a server may name files only under the server's datasets_dir (evalsi run --server inlines script_file)", p[0]))
	}
	if err := s.confineEnvironment("environment", sp.Environment); err != nil {
		return err
	}
	if env := sp.Environment; env != nil && res.Agent != nil {
		// The rules see the images as the workers will resolve them.
		for _, ref := range append([]string{env.Image}, res.Agent.Images...) {
			if r := image.Rewrite(env.ImageMirrors, ref); r != "" && !slices.Contains(res.Agent.Images, r) {
				res.Agent.Images = append(res.Agent.Images, r)
			}
		}
	}
	return s.checkTrials(len(sp.Dataset.Records), sp.Trials)
}

// checkTrials refuses records × trials over max_trials_per_run, without
// multiplying (a huge trials count must not wrap around).
func (s *Server) checkTrials(records, trials int) error {
	trials = max(trials, 1)
	if trials > s.o.MaxTrials || (records > 0 && records > s.o.MaxTrials/trials) {
		return refused(fmt.Errorf("the run has %d records × %d trials; this server takes at most %d trials per run (max_trials_per_run)", records, trials, s.o.MaxTrials))
	}
	return nil
}

// confineRecords checks what the loaded records make of the environment:
// a record may tighten it, and may set nothing a spec may not.
func (s *Server) confineRecords(sp *spec.Spec, records []spec.Record) error {
	if err := s.checkTrials(len(records), sp.Trials); err != nil {
		return err
	}
	fromTauBench := false
	if u, err := url.Parse(sp.Dataset.URI); err == nil && u.Scheme == taubench.Scheme {
		fromTauBench = true
	}
	for _, rec := range records {
		if _, ok := rec.Metadata[tauharness.MetadataKey]; ok && !fromTauBench {
			// It names a directory the harness reads on the worker: only
			// the importer, from a confined data_dir, may set it.
			return refused(fmt.Errorf("record %q sets metadata.%s, which names files on the server; on a server only the taubench:// importer sets it", rec.ID, tauharness.MetadataKey))
		}
	}
	if !sp.IsAgentRun() {
		return nil
	}
	base := sp.Environment
	if base == nil {
		base = &spec.Environment{}
		base.ApplyDefaults()
	}
	for _, rec := range records {
		if raw, ok := rec.Metadata["environment"]; ok {
			// Decoded, not searched: an escaped key spells the same field.
			var fields map[string]json.RawMessage
			if json.Unmarshal(raw, &fields) == nil {
				if _, ok := fields["image_mirrors"]; ok {
					return refused(fmt.Errorf("record %q sets image_mirrors; on a server only the spec file may", rec.ID))
				}
			}
		}
		env, err := dataset.Environment(base, rec)
		if err != nil {
			var le *dataset.LooserError
			if errors.As(err, &le) {
				return refused(err)
			}
			continue // its own trials report it, as embedded
		}
		if err := s.confineEnvironment(fmt.Sprintf("record %q environment", rec.ID), env); err != nil {
			return err
		}
	}
	return nil
}

// confineEnvironment refuses the environment fields that reach a worker's
// own files or leave the sandbox.
func (s *Server) confineEnvironment(field string, env *spec.Environment) error {
	if env == nil {
		return nil
	}
	if !s.o.AllowLocalImages {
		// What the worker resolves is the image after its mirrors: a mirror
		// can rewrite a registry-looking name into a local one.
		if resolved := image.Rewrite(env.ImageMirrors, env.Image); localImage(env.Image) || localImage(resolved) {
			return refused(fmt.Errorf("%s.image %q resolves to %q, a worker's local image; this server takes registry images only (allow_local_images opens it)", field, env.Image, resolved))
		}
		for from, to := range env.ImageMirrors {
			if localImage(to) {
				return refused(fmt.Errorf("%s.image_mirrors maps %q to a worker's local image %q (allow_local_images opens it)", field, from, to))
			}
		}
	}
	sb := env.Sandbox
	if sb == nil {
		return nil
	}
	if (sb.AllowUnsafeHost || slices.Contains(sb.Ladder, "host")) && !s.o.AllowUnsafeHost {
		return refused(fmt.Errorf("%s.sandbox asks for the host rung, which runs model output outside any sandbox; this server refuses it (allow_unsafe_host opens it, and workers must opt in too)", field))
	}
	if c := sb.Cgroup; c != "" && c != "auto" && c != "off" {
		return refused(fmt.Errorf("%s.sandbox.cgroup %q names a directory on the worker; use auto or off", field, c))
	}
	if is := sb.ImageSignatures; is != nil {
		for _, k := range is.Keys {
			if !strings.Contains(k, "-----BEGIN") {
				return refused(fmt.Errorf("%s.sandbox.image_signatures.keys names a file on the worker; give the keys as PEM text", field))
			}
		}
	}
	if fc := sb.Firecracker; fc != nil && (fc.Kernel != "" || fc.Guest != "" || fc.Jailer != "") {
		return refused(fmt.Errorf("%s.sandbox.firecracker names files on the worker; the worker's own configuration sets them", field))
	}
	if q := sb.QEMU; q != nil && (q.Kernel != "" || q.Guest != "") {
		return refused(fmt.Errorf("%s.sandbox.qemu names files on the worker; the worker's own configuration sets them", field))
	}
	return nil
}

// insideDatasets checks that p is a clean relative path resolving inside
// datasets_dir, and not under another project's promoted datasets.
func (s *Server) insideDatasets(project, p string) error {
	if _, err := cleanDatasetPath(p); err != nil {
		return errors.New("must be a clean path relative to the server's datasets_dir")
	}
	if owner := promotedOwner(p); owner != "" && owner != project {
		return errors.New("is not a file under the server's datasets_dir")
	}
	root, err := s.datasetsRoot()
	if err != nil {
		return errors.New("cannot be read: this server has no datasets_dir")
	}
	defer root.Close()
	if _, err := root.Stat(p); err != nil {
		return errors.New("is not a file under the server's datasets_dir")
	}
	return nil
}
