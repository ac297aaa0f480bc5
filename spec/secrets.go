package spec

import (
	"reflect"
	"slices"
	"strings"
)

// The key variables a model reference without api_key_env reads, by
// connector (the documented defaults; package model reads the same).
const (
	DefaultOpenAIKeyEnv    = "OPENAI_API_KEY"
	DefaultAnthropicKeyEnv = "ANTHROPIC_API_KEY"
)

// SecretNames are the names of every worker variable the spec names, sorted
// and unique: by the spec's convention, a field named api_key_env holds a
// variable's name, and env_from and *_env maps (headers_env) map to
// variable names; a model reference without api_key_env reads its
// connector's default key variable. Walking the spec by that convention,
// rather than listing today's fields, keeps a new connector or agent kind
// from being forgotten by redaction or by a server's credential grants.
func (s *Spec) SecretNames() []string {
	var names []string
	var walk func(v reflect.Value)
	walk = func(v reflect.Value) {
		switch v.Kind() {
		case reflect.Pointer, reflect.Interface:
			if !v.IsNil() {
				walk(v.Elem())
			}
		case reflect.Slice, reflect.Array:
			for i := range v.Len() {
				walk(v.Index(i))
			}
		case reflect.Map:
			for it := v.MapRange(); it.Next(); {
				walk(it.Value())
			}
		case reflect.Struct:
			if ref, ok := v.Interface().(ModelRef); ok && ref.APIKeyEnv == "" {
				switch ref.Connector {
				case "openai":
					names = append(names, DefaultOpenAIKeyEnv)
				case "anthropic":
					names = append(names, DefaultAnthropicKeyEnv)
				}
			}
			t := v.Type()
			for i := range t.NumField() {
				f := t.Field(i)
				if !f.IsExported() {
					continue
				}
				tag, _, _ := strings.Cut(f.Tag.Get("json"), ",")
				fv := v.Field(i)
				switch {
				case tag == "api_key_env" && fv.Kind() == reflect.String:
					if fv.String() != "" {
						names = append(names, fv.String())
					}
				case (tag == "env_from" || strings.HasSuffix(tag, "_env")) && fv.Kind() == reflect.Map && fv.Type().Elem().Kind() == reflect.String:
					for it := fv.MapRange(); it.Next(); {
						names = append(names, it.Value().String())
					}
				default:
					walk(fv)
				}
			}
		}
	}
	walk(reflect.ValueOf(s))
	slices.Sort(names)
	return slices.Compact(names)
}

// SecretValues are the values getenv gives the spec's SecretNames, the
// texts a store must redact.
func (s *Spec) SecretValues(getenv func(string) string) []string {
	var values []string
	for _, n := range s.SecretNames() {
		if v := getenv(n); v != "" {
			values = append(values, v)
		}
	}
	return values
}
