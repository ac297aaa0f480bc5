package firecracker

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

// apiSpec is the part of Firecracker's swagger 2.0 description the fake
// Firecracker checks requests against: paths, their operations' body and
// path parameters, and the definitions' schemas.
type apiSpec struct {
	Paths       map[string]map[string]*apiOperation `json:"paths"`
	Definitions map[string]*apiSchema               `json:"definitions"`
}

type apiOperation struct {
	Parameters []struct {
		Name     string     `json:"name"`
		In       string     `json:"in"`
		Required bool       `json:"required"`
		Type     string     `json:"type"`
		Schema   *apiSchema `json:"schema"`
	} `json:"parameters"`
}

type apiSchema struct {
	Ref        string                `json:"$ref"`
	Type       string                `json:"type"`
	Required   []string              `json:"required"`
	Properties map[string]*apiSchema `json:"properties"`
	// AdditionalProperties is true or a schema when the object takes
	// other keys; absent, it takes none (Firecracker's structs refuse
	// unknown fields).
	AdditionalProperties any        `json:"additionalProperties"`
	Items                *apiSchema `json:"items"`
	Enum                 []any      `json:"enum"`
	Minimum              *float64   `json:"minimum"`
	Maximum              *float64   `json:"maximum"`
}

func loadAPISpec(path string) (*apiSpec, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var s apiSpec
	if err := yaml.Unmarshal(data, &s); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(s.Paths) == 0 || len(s.Definitions) == 0 {
		return nil, fmt.Errorf("%s: no paths or definitions", path)
	}
	return &s, nil
}

// validate checks a request against the description: the path and method
// exist, path parameters are there, and the JSON body matches the body
// parameter's schema.
func (s *apiSpec) validate(method, path string, body []byte) error {
	tmpl, params := s.route(path)
	if tmpl == "" {
		return fmt.Errorf("%s is not a path of the API", path)
	}
	op := s.Paths[tmpl][strings.ToLower(method)]
	if op == nil {
		return fmt.Errorf("%s %s: the API has no %s on %s", method, path, method, tmpl)
	}
	hasBody := len(bytes.TrimSpace(body)) > 0
	bodyDeclared := false
	for _, p := range op.Parameters {
		switch p.In {
		case "path":
			if v := params[p.Name]; v == "" && p.Required {
				return fmt.Errorf("%s %s: path parameter %s is empty", method, path, p.Name)
			}
		case "body":
			bodyDeclared = true
			if !hasBody {
				if p.Required {
					return fmt.Errorf("%s %s: the body (%s) is required", method, path, p.Name)
				}
				continue
			}
			dec := json.NewDecoder(bytes.NewReader(body))
			dec.UseNumber()
			var v any
			if err := dec.Decode(&v); err != nil {
				return fmt.Errorf("%s %s: the body is not JSON: %w", method, path, err)
			}
			if err := s.check(p.Schema, v, "body"); err != nil {
				return fmt.Errorf("%s %s: %w", method, path, err)
			}
		}
	}
	if hasBody && !bodyDeclared {
		return fmt.Errorf("%s %s takes no body", method, path)
	}
	return nil
}

// route finds the path template that matches path, with its parameters.
func (s *apiSpec) route(path string) (string, map[string]string) {
	if _, ok := s.Paths[path]; ok {
		return path, nil
	}
	got := strings.Split(path, "/")
	for tmpl := range s.Paths {
		want := strings.Split(tmpl, "/")
		if len(want) != len(got) {
			continue
		}
		params := map[string]string{}
		match := true
		for i, w := range want {
			if strings.HasPrefix(w, "{") && strings.HasSuffix(w, "}") {
				params[strings.Trim(w, "{}")] = got[i]
			} else if w != got[i] {
				match = false
				break
			}
		}
		if match {
			return tmpl, params
		}
	}
	return "", nil
}

func (s *apiSpec) resolve(sch *apiSchema) (*apiSchema, error) {
	for sch != nil && sch.Ref != "" {
		name, ok := strings.CutPrefix(sch.Ref, "#/definitions/")
		if !ok || s.Definitions[name] == nil {
			return nil, fmt.Errorf("unresolvable $ref %q", sch.Ref)
		}
		sch = s.Definitions[name]
	}
	return sch, nil
}

func (s *apiSpec) check(sch *apiSchema, v any, where string) error {
	sch, err := s.resolve(sch)
	if err != nil || sch == nil {
		return err
	}
	typ := sch.Type
	if typ == "" && sch.Properties != nil {
		typ = "object"
	}
	switch typ {
	case "object":
		obj, ok := v.(map[string]any)
		if !ok {
			return fmt.Errorf("%s: want an object, got %T", where, v)
		}
		for _, r := range sch.Required {
			if _, ok := obj[r]; !ok {
				return fmt.Errorf("%s: required property %q is missing", where, r)
			}
		}
		for k, val := range obj {
			prop := sch.Properties[k]
			if prop == nil {
				if sch.AdditionalProperties == nil || sch.AdditionalProperties == false {
					return fmt.Errorf("%s: unknown property %q", where, k)
				}
				continue
			}
			if err := s.check(prop, val, where+"."+k); err != nil {
				return err
			}
		}
	case "string":
		if _, ok := v.(string); !ok {
			return fmt.Errorf("%s: want a string, got %T", where, v)
		}
	case "boolean":
		if _, ok := v.(bool); !ok {
			return fmt.Errorf("%s: want a boolean, got %T", where, v)
		}
	case "integer":
		n, ok := v.(json.Number)
		if !ok {
			return fmt.Errorf("%s: want an integer, got %T", where, v)
		}
		i, err := strconv.ParseInt(n.String(), 10, 64)
		if err != nil {
			return fmt.Errorf("%s: want an integer, got %s", where, n)
		}
		if sch.Minimum != nil && float64(i) < *sch.Minimum {
			return fmt.Errorf("%s: %d is below the minimum %v", where, i, *sch.Minimum)
		}
		if sch.Maximum != nil && float64(i) > *sch.Maximum {
			return fmt.Errorf("%s: %d is above the maximum %v", where, i, *sch.Maximum)
		}
	case "array":
		arr, ok := v.([]any)
		if !ok {
			return fmt.Errorf("%s: want an array, got %T", where, v)
		}
		for i, e := range arr {
			if err := s.check(sch.Items, e, fmt.Sprintf("%s[%d]", where, i)); err != nil {
				return err
			}
		}
	}
	if len(sch.Enum) > 0 {
		got := fmt.Sprint(v)
		if !slices.ContainsFunc(sch.Enum, func(e any) bool { return fmt.Sprint(e) == got }) {
			return fmt.Errorf("%s: %q is not one of %v", where, got, sch.Enum)
		}
	}
	return nil
}

const swaggerPath = "testdata/firecracker.yaml"

// The validator the fake Firecracker relies on must itself refuse what
// Firecracker refuses, or the VMM tests would pass against anything.
func TestSwaggerValidator(t *testing.T) {
	spec, err := loadAPISpec(swaggerPath)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name, method, path, body string
		wantErr                  string // "" = valid
	}{
		{"boot source", "PUT", "/boot-source", `{"kernel_image_path":"vmlinux","initrd_path":"initrd","boot_args":"console=ttyS0"}`, ""},
		{"boot source without kernel", "PUT", "/boot-source", `{"boot_args":"x"}`, `"kernel_image_path" is missing`},
		{"unknown property", "PUT", "/boot-source", `{"kernel_image_path":"k","kernel":"k"}`, `unknown property "kernel"`},
		{"drive", "PUT", "/drives/drive0", `{"drive_id":"drive0","path_on_host":"drive0","is_root_device":true,"is_read_only":false}`, ""},
		{"drive flag as string", "PUT", "/drives/drive0", `{"drive_id":"drive0","is_root_device":"yes"}`, "want a boolean"},
		{"machine config", "PUT", "/machine-config", `{"vcpu_count":2,"mem_size_mib":512}`, ""},
		{"too many vcpus", "PUT", "/machine-config", `{"vcpu_count":33,"mem_size_mib":512}`, "above the maximum"},
		{"memory not an integer", "PUT", "/machine-config", `{"vcpu_count":1,"mem_size_mib":1.5}`, "want an integer"},
		{"vsock cid too low", "PUT", "/vsock", `{"guest_cid":2,"uds_path":"v.sock"}`, "below the minimum"},
		{"action", "PUT", "/actions", `{"action_type":"InstanceStart"}`, ""},
		{"unknown action", "PUT", "/actions", `{"action_type":"Reboot"}`, "not one of"},
		{"pause", "PATCH", "/vm", `{"state":"Paused"}`, ""},
		{"pause is a PATCH", "PUT", "/vm", `{"state":"Paused"}`, "no PUT"},
		{"snapshot load", "PUT", "/snapshot/load", `{"snapshot_path":"s","mem_backend":{"backend_type":"File","backend_path":"m"},"resume_vm":true}`, ""},
		{"memory backend without path", "PUT", "/snapshot/load", `{"snapshot_path":"s","mem_backend":{"backend_type":"File"}}`, `"backend_path" is missing`},
		{"no body", "PUT", "/snapshot/create", ``, "required"},
		{"unknown path", "PUT", "/drive/drive0", `{}`, "not a path"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := spec.validate(c.method, c.path, []byte(c.body))
			switch {
			case c.wantErr == "" && err != nil:
				t.Fatalf("valid request refused: %v", err)
			case c.wantErr != "" && err == nil:
				t.Fatalf("invalid request accepted, want an error with %q", c.wantErr)
			case c.wantErr != "" && !strings.Contains(err.Error(), c.wantErr):
				t.Fatalf("error %q does not say %q", err, c.wantErr)
			}
		})
	}
}

// Every body the VMM sends, checked against its definition directly, so
// a renamed or retyped field in a newer swagger fails here.
func TestRequestBodiesMatchDefinitions(t *testing.T) {
	spec, err := loadAPISpec(swaggerPath)
	if err != nil {
		t.Fatal(err)
	}
	bodies := []struct {
		def  string
		body any
	}{
		{"BootSource", bootSource{KernelImagePath: "vmlinux", InitrdPath: "initrd", BootArgs: bootArgs("")}},
		{"Drive", drive{DriveID: "drive0", PathOnHost: "drive0", IsRootDevice: true}},
		{"MachineConfiguration", machineConfig{VCPUCount: 1, MemSizeMiB: 128}},
		{"Vsock", vsockDevice{GuestCID: guestCID, UDSPath: vsockName}},
		{"InstanceActionInfo", instanceAction{ActionType: "InstanceStart"}},
		{"Vm", vmState{State: "Paused"}},
		{"Vm", vmState{State: "Resumed"}},
		{"SnapshotCreateParams", snapshotCreate{SnapshotType: "Full", SnapshotPath: "vmstate", MemFilePath: "memory"}},
		{"SnapshotLoadParams", snapshotLoad{SnapshotPath: "vmstate", MemBackend: memoryBackend{BackendType: "File", BackendPath: "memory"}, ResumeVM: true}},
	}
	for _, b := range bodies {
		data, _ := json.Marshal(b.body)
		dec := json.NewDecoder(bytes.NewReader(data))
		dec.UseNumber()
		var v any
		if err := dec.Decode(&v); err != nil {
			t.Fatal(err)
		}
		if err := spec.check(&apiSchema{Ref: "#/definitions/" + b.def}, v, b.def); err != nil {
			t.Errorf("%s body %s: %v", b.def, data, err)
		}
	}
}
