// Command k8sproto writes machinery/k8s_proto_schema.json: for every built-in
// kind kube-apiserver serves (machinery/builtin_resources.json) and DeleteOptions, the Go struct layout that
// client-go's protobuf encoding follows, read by reflection from k8s.io/api.
//
// Each Go struct becomes a list of fields in struct order (the order Go's
// encoding/json writes them) with the protobuf field number, the JSON name, the
// json tag options and the field's type. machinery/protobuf.py decodes
// application/vnd.kubernetes.protobuf request bodies with it and produces the
// JSON that upstream would produce for the decoded Go object.
//
// Run: cd tools/k8sproto && go run . > ../../machinery/k8s_proto_schema.json
// tests/test_protobuf.py regenerates it and fails when the committed copy is stale.
package main

import (
	"encoding/json"
	"fmt"
	"os"
	"reflect"
	"sort"
	"strconv"
	"strings"

	apiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8sschema "k8s.io/apimachinery/pkg/runtime/schema"
	k8sscheme "k8s.io/client-go/kubernetes/scheme"
	apiregv1 "k8s.io/kube-aggregator/pkg/apis/apiregistration/v1"
)

// dataFile lists the built-in kinds (tools/discovery_upstream.py extracts it from kube-apiserver's
// discovery): every resource's kind and every subresource's request kind (Binding, Eviction, Scale,
// TokenRequest, ...) but the *Options of connect subresources (query parameters, never bodies).
const dataFile = "../../machinery/builtin_resources.json"

type resource struct {
	Group, Version, Kind string
	Subresources         []struct{ Group, Version, Kind string }
}

// kinds: apiVersion/kind -> an instance of the Go type, from the schemes of k8s.io/api (client-go's),
// apiextensions-apiserver and kube-aggregator.
func kinds() map[string]any {
	sch := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{k8sscheme.AddToScheme, apiextv1.AddToScheme, apiregv1.AddToScheme} {
		if err := add(sch); err != nil {
			panic(err)
		}
	}
	raw, err := os.ReadFile(dataFile)
	if err != nil {
		panic(err)
	}
	var data struct{ Resources []resource }
	if err := json.Unmarshal(raw, &data); err != nil {
		panic(err)
	}
	out := map[string]any{"meta.k8s.io/v1/DeleteOptions": metav1.DeleteOptions{}}
	add := func(gvk k8sschema.GroupVersionKind) {
		obj, err := sch.New(gvk)
		if err != nil {
			panic(err)
		}
		out[gvk.GroupVersion().String()+"/"+gvk.Kind] = reflect.ValueOf(obj).Elem().Interface()
	}
	for _, r := range data.Resources {
		add(k8sschema.GroupVersionKind{Group: r.Group, Version: r.Version, Kind: r.Kind})
		for _, s := range r.Subresources {
			if strings.HasSuffix(s.Kind, "Options") {
				continue
			}
			if s.Group == "" && s.Version == "" {
				s.Group, s.Version = r.Group, r.Version
			}
			add(k8sschema.GroupVersionKind{Group: s.Group, Version: s.Version, Kind: s.Kind})
		}
	}
	return out
}

// special types have their own protobuf message and their own JSON form.
var special = map[string]string{
	"k8s.io/apimachinery/pkg/apis/meta/v1.Time":                                             "time",
	"k8s.io/apimachinery/pkg/apis/meta/v1.MicroTime":                                        "microtime",
	"k8s.io/apimachinery/pkg/apis/meta/v1.FieldsV1":                                         "raw",
	"k8s.io/apimachinery/pkg/runtime.RawExtension":                                          "raw",
	"k8s.io/apimachinery/pkg/util/intstr.IntOrString":                                       "intorstring",
	"k8s.io/apimachinery/pkg/api/resource.Quantity":                                         "quantity",
	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1.JSON":                         "raw",
	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1.JSONSchemaPropsOrArray":       "schemaorarray",
	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1.JSONSchemaPropsOrBool":        "schemaorbool",
	"k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1.JSONSchemaPropsOrStringArray": "schemaorstringarray",
}

// field: [number, jsonName, flags, type]. flags: o omitempty, z omitzero,
// p pointer, e embedded (JSON fields promoted into the parent).
// type: a scalar name, "bytes", a special name, "msg:<name>", ["list", type] or ["map", key, value].
type schema struct {
	Kinds    map[string]string  `json:"kinds"`
	Messages map[string][][]any `json:"messages"`
	Specials map[string]string  `json:"specials"`
}

var out = schema{Kinds: map[string]string{}, Messages: map[string][][]any{}, Specials: map[string]string{}}

var jsonMarshaler = reflect.TypeOf((*json.Marshaler)(nil)).Elem()

func name(t reflect.Type) string { return t.PkgPath() + "." + t.Name() }

func typeOf(t reflect.Type, where string) any {
	if s, ok := special[name(t)]; ok {
		out.Specials[name(t)] = s
		if s == "schemaorarray" || s == "schemaorbool" || s == "schemaorstringarray" {
			walk(reflect.TypeOf(apiextv1.JSONSchemaProps{}))
		}
		return s
	}
	switch t.Kind() {
	case reflect.String, reflect.Bool, reflect.Int32, reflect.Int64, reflect.Uint32, reflect.Uint64,
		reflect.Float32, reflect.Float64:
		return t.Kind().String()
	case reflect.Int:
		return "int64"
	case reflect.Pointer:
		return typeOf(t.Elem(), where)
	case reflect.Slice:
		if t.Elem().Kind() == reflect.Uint8 {
			return "bytes"
		}
		if t.Elem().Kind() == reflect.Slice && t.Elem().Elem().Kind() != reflect.Uint8 {
			panic("nested slice at " + where)
		}
		return []any{"list", typeOf(t.Elem(), where)}
	case reflect.Map:
		return []any{"map", typeOf(t.Key(), where), typeOf(t.Elem(), where)}
	case reflect.Struct:
		walk(t)
		return "msg:" + name(t)
	}
	panic(fmt.Sprintf("unsupported type %s at %s", t, where))
}

func walk(t reflect.Type) {
	n := name(t)
	if _, done := out.Messages[n]; done {
		return
	}
	if reflect.PointerTo(t).Implements(jsonMarshaler) || t.Implements(jsonMarshaler) {
		panic("type with its own JSON form is not marked special: " + n)
	}
	out.Messages[n] = nil // cycle guard (JSONSchemaProps refers to itself)
	fields := [][]any{}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		pb := f.Tag.Get("protobuf")
		if pb == "" {
			continue // TypeMeta: travels in the runtime.Unknown envelope
		}
		jsonTag := f.Tag.Get("json")
		parts := strings.Split(jsonTag, ",")
		if parts[0] == "-" {
			continue
		}
		flags := ""
		for _, opt := range parts[1:] {
			switch opt {
			case "omitempty":
				flags += "o"
			case "omitzero":
				flags += "z"
			}
		}
		if f.Type.Kind() == reflect.Pointer {
			flags += "p"
		}
		jsonName := parts[0]
		if f.Anonymous && jsonName == "" {
			flags += "e"
		} else if jsonName == "" {
			jsonName = f.Name
		}
		num := -1
		for _, p := range strings.Split(pb, ",") {
			if v, err := strconv.Atoi(p); err == nil {
				num = v
				break
			}
		}
		if num < 0 {
			panic("no protobuf field number on " + n + "." + f.Name)
		}
		fields = append(fields, []any{num, jsonName, flags, typeOf(f.Type, n+"."+f.Name)})
	}
	out.Messages[n] = fields
}

func main() {
	kinds := kinds()
	keys := make([]string, 0, len(kinds))
	for k := range kinds {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		t := reflect.TypeOf(kinds[k])
		walk(t)
		out.Kinds[k] = name(t)
	}
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", " ")
	if err := enc.Encode(out); err != nil {
		panic(err)
	}
}
