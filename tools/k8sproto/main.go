// Command k8sproto writes machinery/k8s_proto_schema.json: for every built-in
// kind the apiserver serves (and DeleteOptions), the Go struct layout that
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

	authnv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
	coordv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// kinds served by the apiserver (machinery/resources.py BUILTINS and REVIEWS), keyed by apiVersion/kind.
var kinds = map[string]any{
	"v1/Namespace":                      corev1.Namespace{},
	"v1/ConfigMap":                      corev1.ConfigMap{},
	"v1/Secret":                         corev1.Secret{},
	"v1/Pod":                            corev1.Pod{},
	"v1/Node":                           corev1.Node{},
	"v1/Service":                        corev1.Service{},
	"v1/ServiceAccount":                 corev1.ServiceAccount{},
	"v1/Event":                          corev1.Event{},
	"coordination.k8s.io/v1/Lease":      coordv1.Lease{},
	"rbac.authorization.k8s.io/v1/Role": rbacv1.Role{},
	"rbac.authorization.k8s.io/v1/RoleBinding":         rbacv1.RoleBinding{},
	"rbac.authorization.k8s.io/v1/ClusterRole":         rbacv1.ClusterRole{},
	"rbac.authorization.k8s.io/v1/ClusterRoleBinding":  rbacv1.ClusterRoleBinding{},
	"apiextensions.k8s.io/v1/CustomResourceDefinition": apiextv1.CustomResourceDefinition{},
	"meta.k8s.io/v1/DeleteOptions":                     metav1.DeleteOptions{},
	// review kinds (machinery/resources.py REVIEWS): kubectl sends them as protobuf
	"authentication.k8s.io/v1/SelfSubjectReview":       authnv1.SelfSubjectReview{},
	"authorization.k8s.io/v1/SelfSubjectAccessReview":  authzv1.SelfSubjectAccessReview{},
	"authorization.k8s.io/v1/SubjectAccessReview":      authzv1.SubjectAccessReview{},
	"authorization.k8s.io/v1/LocalSubjectAccessReview": authzv1.LocalSubjectAccessReview{},
	"authorization.k8s.io/v1/SelfSubjectRulesReview":   authzv1.SelfSubjectRulesReview{},
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
