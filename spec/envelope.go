package spec

import (
	"encoding/json"

	"github.com/goccy/go-yaml/ast"
)

// The Kubernetes object a run file can be wrapped in: `kubectl apply -f`
// takes it as an EvalRun, and Load takes the same file as a plain run file.
const (
	EnvelopeAPIVersion = "evals.si/v1alpha1"
	EnvelopeKind       = "EvalRun"
	// EnvelopeBlock is the key inside spec that holds what only the
	// operator reads (the server, the project, the token's Secret). No run
	// file field is called that, so the two never collide.
	EnvelopeBlock = "evalsi"
)

// Envelope is what an EvalRun file says around its run spec.
type Envelope struct {
	Name      string // metadata.name
	Namespace string // metadata.namespace
	// Evalsi is spec.evalsi as JSON (nil when absent); the spec package
	// does not interpret it (package k8s/apis/v1alpha1 does).
	Evalsi json.RawMessage
}

// envelopeKeys are the keys an EvalRun object may have at its top level;
// status is what `kubectl get -o yaml` adds, and is ignored.
var envelopeKeys = []string{"apiVersion", "kind", "metadata", "spec", "status"}

// unwrap returns the run spec inside an EvalRun envelope and the envelope,
// or body itself and nil when body is a plain run file (it has no
// apiVersion and no kind). The spec node keeps its place in the file, so
// errors inside it point at the file's lines.
func (d *decoder) unwrap(body ast.Node) (ast.Node, *Envelope) {
	n, _ := d.resolve(body)
	if !isMapping(n) {
		return body, nil
	}
	top := d.entries(n, "", 0)
	byKey := map[string]entry{}
	for _, e := range top {
		byKey[e.key] = e
	}
	_, hasAPI := byKey["apiVersion"]
	_, hasKind := byKey["kind"]
	if !hasAPI && !hasKind {
		return body, nil
	}
	env := &Envelope{}
	for _, e := range top {
		switch e.key {
		case "apiVersion":
			if v := d.scalar(e.value); v != EnvelopeAPIVersion {
				d.errorAt(e.value, "apiVersion", "an EvalRun file has apiVersion: "+EnvelopeAPIVersion, "apiVersion is %q, not %s", v, EnvelopeAPIVersion)
			}
		case "kind":
			if v := d.scalar(e.value); v != EnvelopeKind {
				d.errorAt(e.value, "kind", "an EvalRun file has kind: "+EnvelopeKind, "kind is %q, not %s", v, EnvelopeKind)
			}
		case "metadata":
			m, _ := d.resolve(e.value)
			if !isMapping(m) {
				d.errorAt(e.value, "metadata", "", "metadata must be a mapping, not %s", kindName(m))
				continue
			}
			for _, me := range d.entries(m, "metadata", 1) {
				switch me.key {
				case "name":
					env.Name = d.scalar(me.value)
				case "namespace":
					env.Namespace = d.scalar(me.value)
				}
			}
		case "spec", "status":
		default:
			hint := ""
			if s := suggest(e.key, envelopeKeys); s != "" {
				hint = "did you mean \"" + s + "\"?"
			}
			d.errorAt(e.keyNode, "", hint, "unknown field %q at the top level of an EvalRun (it has apiVersion, kind, metadata and spec)", e.key)
		}
	}
	if !hasAPI || !hasKind {
		missing := "apiVersion"
		if hasAPI {
			missing = "kind"
		}
		d.errorAt(n, "", "an EvalRun file starts with apiVersion: "+EnvelopeAPIVersion+" and kind: "+EnvelopeKind, "this looks like a Kubernetes object but has no %s", missing)
	}
	se, ok := byKey["spec"]
	if !ok {
		d.errorAt(n, "spec", "put the run file's fields under spec:", "an EvalRun needs a spec")
		return nil, env
	}
	spec, _ := d.resolve(se.value)
	if !isMapping(spec) {
		d.errorAt(se.value, "spec", "", "spec must be a mapping, not %s", kindName(spec))
		return nil, env
	}
	return d.withoutBlock(spec, env), env
}

// withoutBlock returns the spec mapping without its evalsi entry, which it
// records in env.
func (d *decoder) withoutBlock(spec ast.Node, env *Envelope) ast.Node {
	var values []*ast.MappingValueNode
	switch v := spec.(type) {
	case *ast.MappingNode:
		values = v.Values
	case *ast.MappingValueNode:
		values = []*ast.MappingValueNode{v}
	}
	kept := make([]*ast.MappingValueNode, 0, len(values))
	for _, mv := range values {
		if mv != nil && mv.Key != nil && !mv.Key.IsMergeKey() {
			if k, _ := d.resolve(mv.Key); k != nil && isScalar(k) && scalarText(k) == EnvelopeBlock {
				if raw, err := json.Marshal(d.generic(mv.Value, EnvelopeBlock, 1)); err == nil {
					env.Evalsi = raw
				}
				continue
			}
		}
		kept = append(kept, mv)
	}
	if len(kept) == len(values) {
		return spec
	}
	m := &ast.MappingNode{BaseNode: &ast.BaseNode{}, Values: kept}
	if orig, ok := spec.(*ast.MappingNode); ok {
		cp := *orig
		cp.Values = kept
		m = &cp
	}
	return m
}

// scalar is a scalar's text ("" for anything else).
func (d *decoder) scalar(n ast.Node) string {
	n, _ = d.resolve(n)
	if n == nil || !isScalar(n) {
		return ""
	}
	return scalarText(n)
}
