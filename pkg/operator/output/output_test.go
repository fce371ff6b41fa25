package output

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	yaml "go.yaml.in/yaml/v3"
)

type sample struct {
	Name    string   `json:"name"`
	Count   *float64 `json:"count"`
	Version string   `json:"version"`
	List    []int    `json:"list"`
}

func TestYAMLCarriesTheJSONFields(t *testing.T) {
	v := 3.5
	in := sample{Name: "inbound|8080||", Count: &v, Version: "true", List: []int{1, 2}}
	var j, y bytes.Buffer
	if err := WriteJSON(&j, in); err != nil {
		t.Fatal(err)
	}
	if err := WriteYAML(&y, in); err != nil {
		t.Fatal(err)
	}
	var fromJSON, fromYAML map[string]any
	if err := json.Unmarshal(j.Bytes(), &fromJSON); err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(y.Bytes(), &fromYAML); err != nil {
		t.Fatal(err)
	}
	// "true" stays a string, the list stays a list, nil stays null.
	if fromYAML["version"] != "true" || fromYAML["name"] != "inbound|8080||" || fromYAML["count"] != 3.5 || len(fromYAML["list"].([]any)) != 2 {
		t.Errorf("yaml %v from\n%s", fromYAML, y.String())
	}
	if !strings.HasPrefix(y.String(), "---\nname: ") || strings.Contains(y.String(), "{") {
		t.Errorf("want a block-style document:\n%s", y.String())
	}
	if len(fromJSON) != len(fromYAML) {
		t.Errorf("json %v, yaml %v", fromJSON, fromYAML)
	}
}

func TestParse(t *testing.T) {
	for _, ok := range Formats {
		if _, err := Parse(ok); err != nil {
			t.Error(err)
		}
	}
	if _, err := Parse("table"); err == nil {
		t.Error("table accepted")
	}
}
