package spec

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/goccy/go-yaml"
	"github.com/goccy/go-yaml/ast"
	"github.com/goccy/go-yaml/parser"
)

// Pos is a 1-based line and column in a spec file; the zero Pos means
// "unknown".
type Pos struct{ Line, Column int }

// IsValid reports whether the position is known.
func (p Pos) IsValid() bool { return p.Line > 0 }

// Error is one problem in a spec, positioned when the spec came from a file.
type Error struct {
	File   string
	Line   int
	Column int
	// Field is the field path the problem is about ("environment.sandbox.network");
	// shown only when there is no line to point at.
	Field string
	Msg   string
	// Hint says what to do ("did you mean ...?", "use one of ...").
	Hint string
}

func (e *Error) Error() string {
	var b strings.Builder
	switch {
	case e.File != "" && e.Line > 0:
		fmt.Fprintf(&b, "%s:%d:%d: ", e.File, e.Line, e.Column)
	case e.File != "":
		b.WriteString(e.File + ": ")
	case e.Line > 0:
		fmt.Fprintf(&b, "%d:%d: ", e.Line, e.Column)
	}
	// Without a line the field path says where; a message that starts
	// with the path already says it ("trials must be at least 1").
	if e.Line == 0 && e.Field != "" && !strings.HasPrefix(e.Msg, e.Field) {
		b.WriteString(e.Field + ": ")
	}
	b.WriteString(e.Msg)
	if e.Hint != "" {
		b.WriteString("; " + e.Hint)
	}
	return b.String()
}

// Errors is every problem found in a spec, in file order.
type Errors []*Error

func (es Errors) Error() string {
	lines := make([]string, len(es))
	for i, e := range es {
		lines[i] = e.Error()
	}
	return strings.Join(lines, "\n")
}

// Unwrap lets errors.As find each *Error.
func (es Errors) Unwrap() []error {
	out := make([]error, len(es))
	for i, e := range es {
		out[i] = e
	}
	return out
}

// err returns nil for no errors, else the sorted list.
func (es Errors) err() error {
	if len(es) == 0 {
		return nil
	}
	sort.SliceStable(es, func(i, j int) bool {
		if es[i].Line != es[j].Line {
			return es[i].Line < es[j].Line
		}
		return es[i].Column < es[j].Column
	})
	return es
}

// File is a loaded spec with the positions of its fields, so that checks
// made later (by the engine, against registries) can point at file:line:column.
type File struct {
	Spec *Spec
	// Path is the file name as given to Load (or the name given to Parse).
	Path string
	// Dir is the directory that relative paths in the spec (dataset.path,
	// script_file, recording.dir) are relative to.
	Dir string
	// Envelope is set when the file is an EvalRun (see envelope.go).
	Envelope *Envelope
	pos      map[string]Pos
	// keys holds where each mapping key was written, for problems with
	// the key itself (a bad environment variable name); pos has its value.
	keys map[string]Pos
}

// Pos returns the position of a field path such as "environment.checker.parser",
// "evaluators[2].name" or "environment.env.HOME"; for a path not in the file
// (a default, say) it returns the position of its nearest ancestor that is.
// Scalars are positioned at their value, mappings and lists at their key.
func (f *File) Pos(fieldPath string) Pos {
	if f == nil {
		return Pos{}
	}
	for p := fieldPath; p != ""; p = parentPath(p) {
		if pos, ok := f.pos[p]; ok {
			return pos
		}
	}
	return Pos{}
}

// keyPos is where the key of the map entry at fieldPath was written; the
// value's position (Pos) when the key's is not known.
func (f *File) keyPos(fieldPath string) Pos {
	if f != nil {
		if p, ok := f.keys[fieldPath]; ok {
			return p
		}
	}
	return f.Pos(fieldPath)
}

// Errorf returns a *Error positioned at fieldPath.
func (f *File) Errorf(fieldPath, format string, args ...any) error {
	return f.newError(fieldPath, "", format, args...)
}

func (f *File) newError(fieldPath, hint, format string, args ...any) *Error {
	e := &Error{Field: fieldPath, Msg: fmt.Sprintf(format, args...), Hint: hint}
	if f != nil {
		e.File = f.Path
		p := f.Pos(fieldPath)
		e.Line, e.Column = p.Line, p.Column
	}
	return e
}

// parentPath drops the last segment of a field path: "a.b[2]" → "a.b",
// "a.b" → "a", "a" → "".
func parentPath(p string) string {
	if strings.HasSuffix(p, "]") {
		if i := strings.LastIndexByte(p, '['); i >= 0 {
			// A quoted key may itself hold '['; find the bracket that opens it.
			if j := strings.LastIndex(p, `["`); j >= 0 && strings.HasSuffix(p, `"]`) {
				i = j
			}
			return p[:i]
		}
	}
	if i := strings.LastIndexByte(p, '.'); i >= 0 {
		return p[:i]
	}
	return ""
}

var plainKey = regexp.MustCompile(`^[A-Za-z0-9_\-]+$`)

// childPath appends a map key or field name to a path.
func childPath(parent, key string) string {
	if !plainKey.MatchString(key) {
		return parent + "[" + strconv.Quote(key) + "]"
	}
	if parent == "" {
		return key
	}
	return parent + "." + key
}

func indexPath(parent string, i int) string { return fmt.Sprintf("%s[%d]", parent, i) }

// Load reads and decodes a spec file; see Parse.
func Load(path string) (*File, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading spec: %w", err)
	}
	f, err := Parse(path, data)
	if err != nil {
		return nil, err
	}
	if abs, err := filepath.Abs(path); err == nil {
		f.Dir = filepath.Dir(abs)
	}
	return f, nil
}

// maxDocSize bounds a spec; a run file is a few kilobytes, a large inline
// dataset a few megabytes.
const maxDocSize = 64 << 20

// Parse decodes a spec from YAML (JSON is YAML too). name is used in error
// messages and for the default run name (the base name without extension).
//
// Parse reports, all at once and positioned: YAML syntax errors, unknown or
// misspelt fields (with a suggestion), values of the wrong type, and bad
// durations. It then applies defaults (see ApplyDefaults). It does not run
// Validate: the caller may still override fields (the CLI's --judge-model,
// say) and must call File.Validate afterwards.
func Parse(name string, data []byte) (f *File, err error) {
	f = &File{Path: name, pos: map[string]Pos{}, keys: map[string]Pos{}}
	if name != "" {
		f.Dir = filepath.Dir(name)
	}
	if len(data) > maxDocSize {
		return nil, Errors{{File: name, Msg: fmt.Sprintf("spec is %d bytes; the limit is %d", len(data), maxDocSize), Hint: "put large datasets in a JSONL file and name it in dataset.path"}}
	}
	body, perr := parseYAML(name, data)
	if perr != nil {
		return nil, perr
	}
	d := &decoder{file: f, root: "the spec", anchors: map[string]ast.Node{}}
	d.collectAnchors(body, 0)
	// An EvalRun file (kubectl apply's form) holds the run spec under spec.
	body, f.Envelope = d.unwrap(body)
	var v any
	if body != nil {
		v = d.decode(body, reflect.TypeFor[Spec](), "", 0)
	}
	if err := d.errs.err(); err != nil {
		return nil, err
	}
	raw, err := json.Marshal(v)
	if err != nil {
		return nil, Errors{{File: name, Msg: fmt.Sprintf("encoding spec: %v", err)}}
	}
	s := new(Spec)
	if err := json.Unmarshal(raw, s); err != nil {
		// The walk above checks everything encoding/json does; reaching here
		// is a bug in the walk, reported rather than hidden.
		return nil, Errors{{File: name, Msg: fmt.Sprintf("decoding spec: %v", err)}}
	}
	f.Spec = s
	if s.Name == "" && f.Envelope != nil && f.Envelope.Name != "" {
		s.Name = f.Envelope.Name
	}
	if s.Name == "" && name != "" {
		base := filepath.Base(name)
		s.Name = strings.TrimSuffix(base, filepath.Ext(base))
	}
	s.ApplyDefaults()
	return f, nil
}

// Decode decodes YAML or JSON into v, a pointer to any spec type (an
// Environment from a record's metadata, a Script from a script_file), with
// the checks Parse makes: unknown fields with suggestions, wrong types,
// bad durations; the errors are Errors positioned in data and named name.
// It applies no defaults and does not validate.
func Decode(name string, data []byte, v any) error {
	rv := reflect.ValueOf(v)
	if rv.Kind() != reflect.Pointer || rv.IsNil() {
		return fmt.Errorf("spec.Decode: need a non-nil pointer, not %T", v)
	}
	body, err := parseYAML(name, data)
	if err != nil {
		return err
	}
	d := &decoder{file: &File{Path: name, pos: map[string]Pos{}, keys: map[string]Pos{}}, root: "the value", anchors: map[string]ast.Node{}}
	d.collectAnchors(body, 0)
	val := d.decode(body, rv.Type().Elem(), "", 0)
	if err := d.errs.err(); err != nil {
		return err
	}
	raw, err := json.Marshal(val)
	if err != nil {
		return Errors{{File: name, Msg: fmt.Sprintf("encoding: %v", err)}}
	}
	if err := json.Unmarshal(raw, v); err != nil {
		return Errors{{File: name, Msg: fmt.Sprintf("decoding: %v", err)}}
	}
	return nil
}

// parseYAML returns the body of the single document in data.
func parseYAML(name string, data []byte) (body ast.Node, err error) {
	defer func() {
		// The YAML parser is third-party code fed untrusted input; a panic
		// in it must come back as an error, not take down a server.
		if r := recover(); r != nil {
			body, err = nil, Errors{{File: name, Msg: fmt.Sprintf("cannot parse YAML: %v", r)}}
		}
	}()
	af, perr := parser.ParseBytes(data, 0)
	if perr != nil {
		e := &Error{File: name, Msg: perr.Error()}
		var ye yaml.Error
		if errors.As(perr, &ye) {
			e.Msg = "YAML: " + ye.GetMessage()
			if tk := ye.GetToken(); tk != nil && tk.Position != nil {
				e.Line, e.Column = tk.Position.Line, tk.Position.Column
			}
		}
		return nil, Errors{e}
	}
	for _, doc := range af.Docs {
		if doc == nil || doc.Body == nil {
			continue
		}
		if body != nil {
			p := nodePos(doc.Body)
			return nil, Errors{{File: name, Line: p.Line, Column: p.Column, Msg: "more than one YAML document", Hint: "a spec file holds one run; put each run in its own file"}}
		}
		body = doc.Body
	}
	if body == nil {
		return nil, Errors{{File: name, Msg: "empty spec", Hint: "a run spec needs at least dataset and target"}}
	}
	return body, nil
}

// nodePos is where a node starts. Mappings start at their first key.
func nodePos(n ast.Node) (p Pos) {
	defer func() {
		if recover() != nil {
			p = Pos{}
		}
	}()
	switch v := n.(type) {
	case nil:
		return Pos{}
	case *ast.MappingNode:
		if len(v.Values) > 0 {
			return nodePos(v.Values[0])
		}
	case *ast.MappingValueNode:
		if v.Key != nil {
			return nodePos(v.Key)
		}
	case *ast.DocumentNode:
		return nodePos(v.Body)
	}
	tk := n.GetToken()
	if tk == nil || tk.Position == nil {
		return Pos{}
	}
	return Pos{tk.Position.Line, tk.Position.Column}
}

// Limits that keep hostile input (alias bombs, deep nesting) cheap: the
// walk may visit each written node twice plus aliasAllowance more, which
// is plenty for aliases used as intended and little for a "billion laughs".
const (
	maxDepth       = 200
	aliasAllowance = 100_000
)

// decoder walks the YAML AST against the Go types, collecting every
// problem and building a JSON-shaped value for encoding/json to decode.
type decoder struct {
	file    *File
	errs    Errors
	root    string
	anchors map[string]ast.Node
	nodes   int // nodes written in the document
	visits  int
	stopped bool
}

var (
	jsonType      = reflect.TypeFor[JSON]()
	durationType  = reflect.TypeFor[Duration]()
	inputType     = reflect.TypeFor[Input]()
	evaluatorType = reflect.TypeFor[Evaluator]()
	setupStepType = reflect.TypeFor[SetupStep]()
)

func (d *decoder) errorAt(n ast.Node, field, hint, format string, args ...any) {
	p := nodePos(n)
	d.errs = append(d.errs, &Error{File: d.file.Path, Line: p.Line, Column: p.Column, Field: field, Msg: fmt.Sprintf(format, args...), Hint: hint})
}

// tooMuch stops the walk of documents whose aliases expand without bound.
func (d *decoder) tooMuch(n ast.Node, depth int) bool {
	d.visits++
	if d.stopped {
		return true
	}
	if depth > maxDepth || d.visits > 2*d.nodes+aliasAllowance {
		d.stopped = true
		d.errorAt(n, "", "", "document is nested too deeply or expands too far through aliases")
		return true
	}
	return false
}

func (d *decoder) collectAnchors(n ast.Node, depth int) {
	if n == nil || depth > maxDepth {
		return
	}
	d.nodes++
	switch v := n.(type) {
	case *ast.AnchorNode:
		if v.Name != nil {
			d.anchors[scalarText(v.Name)] = v.Value
		}
		d.collectAnchors(v.Value, depth+1)
	case *ast.MappingNode:
		for _, mv := range v.Values {
			d.collectAnchors(mv, depth+1)
		}
	case *ast.MappingValueNode:
		d.collectAnchors(v.Value, depth+1)
	case *ast.SequenceNode:
		for _, e := range v.Values {
			d.collectAnchors(e, depth+1)
		}
	case *ast.TagNode:
		d.collectAnchors(v.Value, depth+1)
	}
}

// resolve strips anchors and tags and follows aliases. str reports a !!str tag.
func (d *decoder) resolve(n ast.Node) (out ast.Node, str bool) {
	for range maxDepth {
		switch v := n.(type) {
		case *ast.AnchorNode:
			n = v.Value
		case *ast.TagNode:
			if v.Start != nil && v.Start.Value == "!!str" {
				str = true
			}
			n = v.Value
		case *ast.AliasNode:
			target, ok := d.anchors[scalarText(v.Value)]
			if !ok {
				d.errorAt(v, "", "", "unknown alias *%s", scalarText(v.Value))
				return nil, false
			}
			n = target
		default:
			return n, str
		}
	}
	return nil, false
}

// scalarText is a scalar's source text (for keys and for coercing numbers
// and booleans into string fields).
func scalarText(n ast.Node) string {
	switch v := n.(type) {
	case nil:
		return ""
	case *ast.StringNode:
		return v.Value
	case *ast.LiteralNode:
		if v.Value != nil {
			return v.Value.Value
		}
		return ""
	case *ast.NullNode:
		return ""
	}
	if tk := n.GetToken(); tk != nil {
		return tk.Value
	}
	return ""
}

// kindName describes a node for "must be X, not Y" messages.
func kindName(n ast.Node) string {
	switch v := n.(type) {
	case *ast.MappingNode, *ast.MappingValueNode:
		return "a mapping"
	case *ast.SequenceNode:
		return "a list"
	case *ast.StringNode, *ast.LiteralNode:
		return fmt.Sprintf("the string %q", truncate(scalarText(v), 40))
	case *ast.IntegerNode:
		return "the integer " + scalarText(v)
	case *ast.FloatNode, *ast.InfinityNode, *ast.NanNode:
		return "the number " + scalarText(v)
	case *ast.BoolNode:
		return "the boolean " + scalarText(v)
	case *ast.NullNode:
		return "null"
	}
	return "a " + n.Type().String()
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// display names a path in messages; the root is "the spec" or "the value".
func (d *decoder) display(path string) string {
	if path == "" {
		return d.root
	}
	return path
}

// entry is one key of a mapping, after merge keys are applied.
type entry struct {
	key     string
	keyNode ast.Node
	value   ast.Node
}

// entries lists a mapping's keys in order. Keys merged in with "<<" come
// after, and lose to, keys written out.
func (d *decoder) entries(n ast.Node, path string, depth int) []entry {
	var values []*ast.MappingValueNode
	switch v := n.(type) {
	case *ast.MappingNode:
		values = v.Values
	case *ast.MappingValueNode:
		values = []*ast.MappingValueNode{v}
	}
	var out, merged []entry
	seen := map[string]bool{}
	for _, mv := range values {
		if mv == nil || mv.Key == nil {
			continue
		}
		if mv.Key.IsMergeKey() {
			src, _ := d.resolve(mv.Value)
			var srcs []ast.Node
			if seq, ok := src.(*ast.SequenceNode); ok {
				for _, s := range seq.Values {
					r, _ := d.resolve(s)
					srcs = append(srcs, r)
				}
			} else {
				srcs = append(srcs, src)
			}
			for _, s := range srcs {
				switch s.(type) {
				case *ast.MappingNode, *ast.MappingValueNode:
					if d.tooMuch(s, depth+1) {
						return out
					}
					merged = append(merged, d.entries(s, path, depth+1)...)
				case nil:
				default:
					d.errorAt(mv.Value, path, "", "a merge key (<<) needs a mapping, not %s", kindName(s))
				}
			}
			continue
		}
		keyNode, _ := d.resolve(mv.Key)
		switch keyNode.(type) {
		case *ast.MappingNode, *ast.MappingValueNode, *ast.SequenceNode, nil:
			d.errorAt(mv.Key, path, "", "keys in %s must be strings", d.display(path))
			continue
		}
		k := scalarText(keyNode)
		seen[k] = true
		out = append(out, entry{key: k, keyNode: mv.Key, value: mv.Value})
	}
	for _, e := range merged {
		if !seen[e.key] {
			seen[e.key] = true
			out = append(out, e)
		}
	}
	return out
}

// field is one JSON-visible field of a struct type.
type field struct {
	name string
	typ  reflect.Type
}

// fieldsOf lists a struct's JSON fields, flattening untagged embedded
// structs as encoding/json does.
func fieldsOf(t reflect.Type) []field {
	var out []field
	for i := range t.NumField() {
		sf := t.Field(i)
		tag := sf.Tag.Get("json")
		name, _, _ := strings.Cut(tag, ",")
		if sf.Anonymous && name == "" && sf.Type.Kind() == reflect.Struct {
			out = append(out, fieldsOf(sf.Type)...)
			continue
		}
		if !sf.IsExported() || name == "-" {
			continue
		}
		if name == "" {
			name = sf.Name
		}
		out = append(out, field{name, sf.Type})
	}
	return out
}

// decode checks node n against type t and returns a value that
// encoding/json decodes into t. Problems are collected in d.errs.
func (d *decoder) decode(n ast.Node, t reflect.Type, path string, depth int) any {
	if d.tooMuch(n, depth) {
		return nil
	}
	orig := n
	n, str := d.resolve(n)
	if n == nil {
		return nil
	}
	pos := nodePos(orig)
	if _, ok := d.file.pos[path]; !ok || isScalar(n) {
		d.file.pos[path] = pos
	}
	_, null := n.(*ast.NullNode)

	switch t {
	case jsonType:
		return d.generic(n, path, depth)
	case durationType:
		if null {
			return nil
		}
		s, ok := n.(*ast.StringNode)
		if !ok {
			d.errorAt(orig, path, `write it as a string such as "90s", "10m" or "1h30m"`, "%s must be a duration, not %s", d.display(path), kindName(n))
			return nil
		}
		v, err := time.ParseDuration(s.Value)
		switch {
		case err != nil:
			d.errorAt(orig, path, `use a number with a unit: "90s", "10m", "1h30m"`, "bad duration %q for %s", s.Value, d.display(path))
			return nil
		case v < 0:
			d.errorAt(orig, path, "durations must not be negative", "bad duration %q for %s", s.Value, d.display(path))
			return nil
		}
		return s.Value
	case inputType:
		switch n.(type) {
		case *ast.SequenceNode:
			return d.decode(orig, reflect.TypeFor[[]InputMessage](), path, depth)
		case *ast.MappingNode, *ast.MappingValueNode:
			d.errorAt(orig, path, "", "%s must be a string or a list of {role, content} messages, not a mapping", d.display(path))
			return nil
		}
		return d.decode(orig, reflect.TypeFor[string](), path, depth)
	case setupStepType:
		// A plain command string is a step run as root.
		if _, ok := n.(*ast.StringNode); ok {
			return d.decode(orig, reflect.TypeFor[string](), path, depth)
		}
	case evaluatorType:
		// Shorthand: "- task-success" is {name: task-success}.
		if s, ok := n.(*ast.StringNode); ok {
			d.file.pos[path+".name"] = pos
			return map[string]any{"name": s.Value}
		}
	}

	switch t.Kind() {
	case reflect.Pointer:
		if null {
			// "builtin:" with nothing after it means "present, with defaults",
			// as {} does; nil would silently drop the section.
			if t.Elem().Kind() == reflect.Struct {
				return map[string]any{}
			}
			return nil
		}
		return d.decode(orig, t.Elem(), path, depth)
	case reflect.Struct:
		if null {
			return nil
		}
		if !isMapping(n) {
			d.errorAt(orig, path, "", "%s must be a mapping, not %s", d.display(path), kindName(n))
			return nil
		}
		fields := fieldsOf(t)
		out := map[string]any{}
		for _, e := range d.entries(n, path, depth) {
			var ft reflect.Type
			for _, f := range fields {
				if f.name == e.key {
					ft = f.typ
					break
				}
			}
			if ft == nil {
				names := make([]string, len(fields))
				for i, f := range fields {
					names[i] = f.name
				}
				hint := ""
				if s := suggest(e.key, names); s != "" {
					hint = fmt.Sprintf("did you mean %q?", s)
				}
				where := "in " + path
				if path == "" {
					where = "at the top level"
				}
				d.errorAt(e.keyNode, path, hint, "unknown field %q %s", e.key, where)
				continue
			}
			cp := childPath(path, e.key)
			d.file.pos[cp] = nodePos(e.keyNode)
			if v := d.decode(e.value, ft, cp, depth+1); v != nil {
				out[e.key] = v
			}
		}
		return out
	case reflect.Map:
		if null {
			return nil
		}
		if !isMapping(n) {
			d.errorAt(orig, path, "", "%s must be a mapping, not %s", d.display(path), kindName(n))
			return nil
		}
		out := map[string]any{}
		for _, e := range d.entries(n, path, depth) {
			cp := childPath(path, e.key)
			d.file.pos[cp] = nodePos(e.keyNode)
			d.file.keys[cp] = d.file.pos[cp]
			v := d.decode(e.value, t.Elem(), cp, depth+1)
			out[e.key] = v
		}
		return out
	case reflect.Slice:
		if null {
			return nil
		}
		seq, ok := n.(*ast.SequenceNode)
		if !ok {
			d.errorAt(orig, path, "", "%s must be a list, not %s", d.display(path), kindName(n))
			return nil
		}
		out := make([]any, 0, len(seq.Values))
		for i, e := range seq.Values {
			out = append(out, d.decode(e, t.Elem(), indexPath(path, i), depth+1))
		}
		return out
	case reflect.String:
		switch n.(type) {
		case *ast.NullNode:
			return nil
		case *ast.StringNode, *ast.LiteralNode:
			return scalarText(n)
		case *ast.IntegerNode, *ast.FloatNode, *ast.BoolNode, *ast.InfinityNode, *ast.NanNode:
			// env: {DEBUG: 1} means the string "1"; keep the text as written.
			return scalarText(n)
		}
		d.errorAt(orig, path, "", "%s must be a string, not %s", d.display(path), kindName(n))
		return nil
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		if null {
			return nil
		}
		iv, ok := n.(*ast.IntegerNode)
		if !ok || str {
			d.errorAt(orig, path, "", "%s must be an integer, not %s", d.display(path), kindName(n))
			return nil
		}
		var v int64
		switch x := iv.Value.(type) {
		case int64:
			v = x
		case uint64:
			if x > math.MaxInt64 {
				ok = false
			}
			v = int64(x)
		default:
			ok = false
		}
		if !ok || reflect.Zero(t).OverflowInt(v) {
			d.errorAt(orig, path, "", "%s: %s is out of range", d.display(path), scalarText(n))
			return nil
		}
		return json.Number(strconv.FormatInt(v, 10))
	case reflect.Float32, reflect.Float64:
		if null {
			return nil
		}
		if str {
			d.errorAt(orig, path, "", "%s must be a number, not a string", d.display(path))
			return nil
		}
		switch v := n.(type) {
		case *ast.IntegerNode:
			return json.Number(numberText(v.Value))
		case *ast.FloatNode:
			if !math.IsInf(v.Value, 0) && !math.IsNaN(v.Value) {
				return json.Number(strconv.FormatFloat(v.Value, 'g', -1, 64))
			}
			d.errorAt(orig, path, "", "%s must be a finite number, not %s", d.display(path), scalarText(n))
			return nil
		case *ast.InfinityNode, *ast.NanNode:
			d.errorAt(orig, path, "", "%s must be a finite number, not %s", d.display(path), scalarText(n))
			return nil
		}
		d.errorAt(orig, path, "", "%s must be a number, not %s", d.display(path), kindName(n))
		return nil
	case reflect.Bool:
		if null {
			return nil
		}
		b, ok := n.(*ast.BoolNode)
		if !ok || str {
			d.errorAt(orig, path, "write true or false", "%s must be a boolean, not %s", d.display(path), kindName(n))
			return nil
		}
		return b.Value
	}
	d.errorAt(orig, path, "", "%s has a type the spec loader does not handle (%s)", d.display(path), t)
	return nil
}

func numberText(v any) string {
	switch x := v.(type) {
	case int64:
		return strconv.FormatInt(x, 10)
	case uint64:
		return strconv.FormatUint(x, 10)
	}
	return fmt.Sprint(v)
}

func isMapping(n ast.Node) bool {
	switch n.(type) {
	case *ast.MappingNode, *ast.MappingValueNode:
		return true
	}
	return false
}

// isScalar reports whether a node is a value to point at. Null is not:
// "oracle:" is better pointed at by its key.
func isScalar(n ast.Node) bool {
	switch n.(type) {
	case *ast.MappingNode, *ast.MappingValueNode, *ast.SequenceNode, *ast.NullNode:
		return false
	}
	return true
}

// generic converts any YAML value to JSON, keeping key order.
func (d *decoder) generic(n ast.Node, path string, depth int) any {
	if d.tooMuch(n, depth) {
		return nil
	}
	orig := n
	n, str := d.resolve(n)
	if n == nil {
		return nil
	}
	if _, ok := d.file.pos[path]; !ok || isScalar(n) {
		d.file.pos[path] = nodePos(orig)
	}
	if str {
		return scalarText(n)
	}
	switch v := n.(type) {
	case *ast.NullNode:
		return nil
	case *ast.StringNode, *ast.LiteralNode:
		return scalarText(v)
	case *ast.BoolNode:
		return v.Value
	case *ast.IntegerNode:
		return json.Number(numberText(v.Value))
	case *ast.FloatNode:
		if !math.IsInf(v.Value, 0) && !math.IsNaN(v.Value) {
			return json.Number(strconv.FormatFloat(v.Value, 'g', -1, 64))
		}
	case *ast.SequenceNode:
		out := make([]any, 0, len(v.Values))
		for i, e := range v.Values {
			out = append(out, d.generic(e, indexPath(path, i), depth+1))
		}
		return out
	case *ast.MappingNode, *ast.MappingValueNode:
		var buf bytes.Buffer
		buf.WriteByte('{')
		i := 0
		for _, e := range d.entries(n, path, depth) {
			cp := childPath(path, e.key)
			d.file.pos[cp] = nodePos(e.keyNode)
			val, err := json.Marshal(d.generic(e.value, cp, depth+1))
			if err != nil {
				d.errorAt(e.value, cp, "", "%s cannot be written as JSON: %v", cp, err)
				continue
			}
			if i > 0 {
				buf.WriteByte(',')
			}
			i++
			k, _ := json.Marshal(e.key)
			buf.Write(k)
			buf.WriteByte(':')
			buf.Write(val)
		}
		buf.WriteByte('}')
		return json.RawMessage(buf.Bytes())
	}
	d.errorAt(orig, path, "", "%s: %s has no JSON equivalent", d.display(path), kindName(n))
	return nil
}
