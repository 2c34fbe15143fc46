package api_test

import (
	"encoding/json"
	"errors"
	"net/url"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/arbor-dev/arbor/api"
)

// jsonNames lists the JSON names of a struct type's fields.
func jsonNames(t reflect.Type) []string {
	var out []string
	for i := range t.NumField() {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		out = append(out, name)
	}
	return out
}

// TestVerbTable: ops are unique and known to Lookup; request and reply
// fields name real fields of api.Request and api.Response; an HTTP body's
// fields are request fields and fill the request back; a route maps a
// request to a path and the path back to the same ids.
func TestVerbTable(t *testing.T) {
	reqFields, respFields := jsonNames(reflect.TypeOf(api.Request{})), jsonNames(reflect.TypeOf(api.Response{}))
	routes := map[string]string{}
	for _, v := range api.Verbs() {
		if got, ok := api.Lookup(v.Op); !ok || got.Op != v.Op {
			t.Errorf("Lookup(%s) = %v, %v", v.Op, got, ok)
		}
		if v.Reply == "" {
			t.Errorf("%s: no reply status", v.Op)
		}
		for _, f := range v.Request {
			if !slices.Contains(reqFields, f) || f == "op" {
				t.Errorf("%s: request field %q is not a field of api.Request", v.Op, f)
			}
		}
		for _, f := range v.ReplyFields {
			if !slices.Contains(respFields, f) || f == "status" {
				t.Errorf("%s: reply field %q is not a field of api.Response", v.Op, f)
			}
		}
		if v.Path == "" {
			if v.Method != "" || v.Body != nil || v.Created {
				t.Errorf("%s: HTTP details without a route", v.Op)
			}
			continue
		}
		key := v.Method + " " + v.Path + "?" + v.Flag
		if prev, dup := routes[key]; dup && !(prev == api.OpTreeFork && v.Op == api.OpTreeForkBatch) {
			t.Errorf("%s and %s share the route %s", prev, v.Op, key)
		}
		routes[key] = v.Op
		full := api.Request{Op: v.Op, TreeID: "t/1", NodeID: "n 2", SourceID: "s3", Label: "l", Labels: []string{"a"}, Base: "/b", Backend: "dir", Image: "py", Network: "outbound",
			Suite: "bookworm", Variant: "minbase", Packages: []string{"hello"}}
		path, err := v.HTTPPath(full, url.PathEscape)
		if err != nil {
			t.Errorf("%s: HTTPPath: %v", v.Op, err)
			continue
		}
		values := map[string]string{}
		for seg, pat := range zip(strings.Split(path, "/"), strings.Split(v.Path, "/")) {
			if strings.HasPrefix(pat, "{") {
				values[strings.Trim(pat, "{}")], _ = url.PathUnescape(seg)
			}
		}
		var back api.Request
		v.FromPath(&back, func(k string) string { return values[k] })
		if v.Body != nil {
			b, _ := json.Marshal(v.Body(full))
			var m map[string]any
			json.Unmarshal(b, &m)
			for f := range m {
				if !slices.Contains(v.Request, f) {
					t.Errorf("%s: body field %q is not one of the verb's request fields %v", v.Op, f, v.Request)
				}
			}
			empty := v.Body(api.Request{})
			if err := json.Unmarshal(b, empty); err != nil {
				t.Fatalf("%s: body %s: %v", v.Op, b, err)
			}
			if err := empty.Fill(&back); err != nil {
				t.Errorf("%s: Fill: %v", v.Op, err)
			}
		}
		if back.Op != v.Op {
			t.Errorf("%s: the route and body give op %s", v.Op, back.Op)
		}
		for _, f := range v.Request {
			a, _ := json.Marshal(full)
			c, _ := json.Marshal(back)
			var am, cm map[string]any
			json.Unmarshal(a, &am)
			json.Unmarshal(c, &cm)
			if !reflect.DeepEqual(am[f], cm[f]) {
				t.Errorf("%s: field %s went %v over HTTP and came back %v", v.Op, f, am[f], cm[f])
			}
		}
		if strings.Contains(v.Path, "{tree}") {
			if _, err := v.HTTPPath(api.Request{Op: v.Op}, url.PathEscape); err == nil {
				t.Errorf("%s: a path without tree_id", v.Op)
			}
		}
	}
	if _, ok := api.Lookup("tree_explode"); ok {
		t.Error("Lookup knows an op the table does not have")
	}
}

// TestFilesRoute: a file verb's path and query go over HTTP and come back
// as they were (escaped segment by segment), and a bad query value is a
// bad request.
func TestFilesRoute(t *testing.T) {
	for _, tc := range []api.Request{
		{Op: api.OpFileRead, TreeID: "t", NodeID: "n1", Path: "a b/c%d/é?x#y"},
		{Op: api.OpFileStat, TreeID: "t", NodeID: "n1", Path: "a/../b/./c/.."},
		{Op: api.OpFileWrite, TreeID: "t", NodeID: "n1", Path: "/tmp/x", Mode: 0o750},
		{Op: api.OpFileMkdir, TreeID: "t", NodeID: "n1", Path: "d/e"},
		{Op: api.OpFileRemove, TreeID: "t", NodeID: "n1", Path: "d", Recursive: true},
		{Op: api.OpFileList, TreeID: "t", NodeID: "n1", Path: ""},
		{Op: api.OpExecLogs, TreeID: "t", NodeID: "n1", ProcessID: "p7", Follow: true},
	} {
		v, _ := api.Lookup(tc.Op)
		p, err := v.HTTPPath(tc, url.PathEscape)
		if err != nil {
			t.Fatalf("%s: %v", tc.Op, err)
		}
		u, err := url.Parse("http://h" + p)
		if err != nil {
			t.Fatalf("%s: %s: %v", tc.Op, p, err)
		}
		if v.Flag != "" && u.Query().Get(v.Flag) != "1" {
			t.Errorf("%s: %s lacks ?%s", tc.Op, p, v.Flag)
		}
		prefix := "/v1/trees/t/nodes/n1/files/"
		back := api.Request{}
		v.FromPath(&back, func(k string) string {
			switch k {
			case "tree":
				return "t"
			case "node":
				return "n1"
			}
			return strings.TrimPrefix(u.Path, prefix)
		})
		if err := v.FromQuery(&back, u.Query()); err != nil {
			t.Fatalf("%s: FromQuery: %v", tc.Op, err)
		}
		want := tc
		want.Path = strings.TrimLeft(tc.Path, "/")
		if !reflect.DeepEqual(back, want) {
			t.Errorf("%s: %s came back %+v, want %+v", tc.Op, p, back, want)
		}
	}
	v, _ := api.Lookup(api.OpFileWrite)
	for _, bad := range []string{"mode=rw", "mode=077777", "mode=-1"} {
		q, _ := url.ParseQuery(bad)
		if err := v.FromQuery(&api.Request{}, q); !errors.Is(err, api.ErrBadRequest) {
			t.Errorf("?%s: %v, want bad request", bad, err)
		}
	}
}

func zip(a, b []string) map[string]string {
	m := map[string]string{}
	for i := range min(len(a), len(b)) {
		m[a[i]] = b[i]
	}
	return m
}
