// Package output holds the one rule every meshdrain command that prints data follows: -o
// text (for people), json (one object per line) or yaml (the same fields, one document per
// object). YAML is derived from the JSON encoding, so the two always carry the same keys in
// the same order, and a type needs only its json tags.
package output

import (
	"encoding/json"
	"fmt"
	"io"

	yaml "go.yaml.in/yaml/v3"
)

// Formats.
const (
	Text = "text"
	JSON = "json"
	YAML = "yaml"
)

// Formats lists the -o values, for flag help and shell completion.
var Formats = []string{Text, JSON, YAML}

// Parse validates an -o value.
func Parse(s string) (string, error) {
	switch s {
	case Text, JSON, YAML:
		return s, nil
	}
	return "", fmt.Errorf("output %q: want text, json or yaml", s)
}

// WriteJSON writes v as one JSON object on one line, so a stream of them is JSON Lines.
func WriteJSON(w io.Writer, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = w.Write(append(data, '\n'))
	return err
}

// WriteYAML writes v as one YAML document ("---" first, so a stream of them parses).
func WriteYAML(w io.Writer, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return err
	}
	clearStyle(&doc)
	if _, err := io.WriteString(w, "---\n"); err != nil {
		return err
	}
	enc := yaml.NewEncoder(w)
	enc.SetIndent(2)
	enc.CompactSeqIndent()
	if err := enc.Encode(&doc); err != nil {
		return err
	}
	return enc.Close()
}

// Write writes v as format (JSON or YAML).
func Write(w io.Writer, format string, v any) error {
	if format == YAML {
		return WriteYAML(w, v)
	}
	return WriteJSON(w, v)
}

// clearStyle turns JSON's flow style and quoting into YAML's block style; the encoder still
// quotes a string that YAML would read as another type.
func clearStyle(n *yaml.Node) {
	n.Style = 0
	for _, c := range n.Content {
		clearStyle(c)
	}
}
