package plan

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	yaml "go.yaml.in/yaml/v3"
)

// FuzzWriteManifests: whatever manifest plan accepts, the spliced output says what the
// planned tree says, and planning it again changes nothing.
func FuzzWriteManifests(f *testing.F) {
	files, _ := filepath.Glob(filepath.Join("testdata", "gitops", "*.yaml"))
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte(twoWorkloads))
	f.Add([]byte("apiVersion: v1\nkind: Service\nmetadata:\n  name: web\n%YAML 1.1\n---\nkind: Deployment\nmetadata: {name: web}\n" +
		"spec:\n  template:\n    spec:\n      containers:\n      - name: web\n        args:\n        - |\n          #!/bin/sh\n          exec web\n"))
	p, err := Recommend(Input{P99: 450 * ms, EDSLag: 8 * s, AppDrain: 2 * s, Sidecar: Classic})
	if err != nil {
		f.Fatal(err)
	}
	plan := func(in []byte) (out []byte, tree []any, ok bool) {
		m, err := ReadManifests(bytes.NewReader(in))
		if err != nil {
			return nil, nil, false
		}
		w, err := m.Workload("", "")
		if err != nil {
			return nil, nil, false
		}
		e, err := NewEdit(p, PatchOptions{Image: DefaultImage, Dir: "/meshdrain", ReplacePreStop: true}, w)
		if err != nil || e.Apply() != nil {
			return nil, nil, false
		}
		var buf, encoded bytes.Buffer
		if err := m.Write(&buf); err != nil {
			f.Fatalf("write: %v\n%s", err, in)
		}
		enc := yaml.NewEncoder(&encoded)
		for _, doc := range m.docs {
			if err := enc.Encode(doc); err != nil {
				return nil, nil, false // a tree the encoder cannot write (the old writer failed too)
			}
		}
		return buf.Bytes(), fuzzDecode(encoded.Bytes()), true
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		// A file that ends in a literal without a final newline is the one case where what
		// plan appends after it changes a value ("x" becomes "x\n"): YAML has no way to say
		// otherwise without rewriting the literal's header.
		if !bytes.HasSuffix(in, []byte("\n")) {
			in = append(in, '\n')
		}
		out, tree, ok := plan(in)
		if !ok {
			return
		}
		if got := fuzzDecode(out); !reflect.DeepEqual(got, tree) {
			t.Fatalf("output says something else than the planned tree:\n%s\n--- output:\n%s", in, out)
		}
		again, _, ok := plan(out)
		if !ok || !bytes.Equal(again, out) {
			t.Fatalf("a second plan changed the output:\n%s\n--- second:\n%s", out, again)
		}
	})
}

// fuzzDecode decodes every non-empty document; nil when the text is no YAML.
func fuzzDecode(text []byte) []any {
	var docs []any
	dec := yaml.NewDecoder(bytes.NewReader(text))
	for {
		var v any
		err := dec.Decode(&v)
		if errors.Is(err, io.EOF) {
			return docs
		}
		if err != nil {
			return []any{"undecodable: " + err.Error()}
		}
		if v != nil {
			docs = append(docs, v)
		}
	}
}
