package server

import (
	"errors"
	"fmt"
	"net/url"
	"path"
	"slices"
	"strings"

	"evals.si/access"
	"evals.si/dataset"
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
	for _, p := range []string{"dir:", "oci-layout:", "docker-archive:", "/", "./", "../"} {
		if strings.HasPrefix(ref, p) {
			return true
		}
	}
	return false
}

// datasetFiles are the server-side files a spec's dataset names, by field.
// An opaque URI (scheme:path) names a path just as scheme://path does for
// the importers; it is read the same way here.
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
	// Everything else the spec names as a path is a file on the worker.
	named := map[string]bool{sp.Dataset.URI: true}
	for _, p := range files {
		named[p] = true
	}
	for _, p := range res.Paths {
		if !named[p] {
			return refused(fmt.Errorf("the spec names %q, a file on the worker; a spec run on a server may name files only under the server's datasets_dir (evalsi run --server inlines script_file)", p))
		}
	}
	if err := s.confineEnvironment("environment", sp.Environment); err != nil {
		return err
	}
	if sp.Environment != nil && res.Agent != nil {
		for _, to := range sp.Environment.ImageMirrors {
			if !slices.Contains(res.Agent.Images, to) {
				res.Agent.Images = append(res.Agent.Images, to)
			}
		}
	}
	if n := len(sp.Dataset.Records) * max(sp.Trials, 1); s.o.MaxTrials > 0 && n > s.o.MaxTrials {
		return refused(fmt.Errorf("the run has %d trials; this server takes at most %d per run (max_trials_per_run)", n, s.o.MaxTrials))
	}
	return nil
}

// confineRecords checks what the loaded records make of the environment:
// a record may tighten it, and may set nothing a spec may not.
func (s *Server) confineRecords(sp *spec.Spec, records []spec.Record) error {
	if n := len(records) * max(sp.Trials, 1); s.o.MaxTrials > 0 && n > s.o.MaxTrials {
		return refused(fmt.Errorf("the run has %d records × %d trials; this server takes at most %d trials per run (max_trials_per_run)", len(records), max(sp.Trials, 1), s.o.MaxTrials))
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
		if raw, ok := rec.Metadata["environment"]; ok && strings.Contains(string(raw), `"image_mirrors"`) {
			return refused(fmt.Errorf("record %q sets image_mirrors; on a server only the spec file may", rec.ID))
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
		if localImage(env.Image) {
			return refused(fmt.Errorf("%s.image %q is a worker's local image; this server takes registry images only (allow_local_images opens it)", field, env.Image))
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
