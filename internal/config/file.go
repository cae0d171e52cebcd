package config

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"
)

// File is the server's YAML configuration file, flattened to dotted keys
// ("quack-on-demand.autoscale.sweepSeconds"). Readers take the keys they
// know; Unknown then names every key nobody took, so a typo stops start-up
// instead of being ignored.
type File struct {
	Path   string
	values map[string]fileValue
	used   map[string]bool
}

type fileValue struct {
	scalar string
	list   []string
	isList bool
	line   int
}

// MaxFileSize bounds the config file; anything larger is refused unread.
const MaxFileSize = 1 << 20

// ReadFile reads and parses the YAML file at path.
func ReadFile(path string) (*File, error) {
	info, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("config file: %w", err)
	}
	if info.Size() > MaxFileSize {
		return nil, fmt.Errorf("config file %s is %d bytes; accepted: at most %d", path, info.Size(), MaxFileSize)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config file: %w", err)
	}
	return ParseFile(path, data)
}

// ParseFile parses YAML text; path only names the file in messages.
func ParseFile(path string, data []byte) (*File, error) {
	f := &File{Path: path, values: map[string]fileValue{}, used: map[string]bool{}}
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err != nil {
		return nil, fmt.Errorf("config file %s: %v", path, err)
	}
	if root.Kind == 0 { // empty file
		return f, nil
	}
	doc := &root
	if doc.Kind == yaml.DocumentNode && len(doc.Content) == 1 {
		doc = doc.Content[0]
	}
	if doc.Kind == yaml.ScalarNode && doc.Tag == "!!null" {
		return f, nil
	}
	if doc.Kind != yaml.MappingNode {
		return nil, fmt.Errorf("config file %s line %d: the top level must be a mapping of keys to values", path, doc.Line)
	}
	if err := f.flatten("", doc, 0); err != nil {
		return nil, err
	}
	return f, nil
}

func (f *File) flatten(prefix string, n *yaml.Node, depth int) error {
	if depth > 8 {
		return fmt.Errorf("config file %s line %d: nested deeper than any key this server knows", f.Path, n.Line)
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if k.Kind != yaml.ScalarNode || k.Value == "" {
			return fmt.Errorf("config file %s line %d: keys must be plain names", f.Path, k.Line)
		}
		key := k.Value
		if prefix != "" {
			key = prefix + "." + k.Value
		}
		if _, dup := f.values[key]; dup {
			return fmt.Errorf("config file %s line %d: %s is set twice", f.Path, k.Line, key)
		}
		switch v.Kind {
		case yaml.MappingNode:
			if err := f.flatten(key, v, depth+1); err != nil {
				return err
			}
		case yaml.SequenceNode:
			if len(v.Content) > 0 && v.Content[0].Kind == yaml.MappingNode {
				// A list of blocks (the client's services): each item's
				// keys are flattened under key.0, key.1, ...
				if len(v.Content) > 64 {
					return fmt.Errorf("config file %s line %d: %s has %d items; accepted: at most 64", f.Path, v.Line, key, len(v.Content))
				}
				for i, item := range v.Content {
					if item.Kind != yaml.MappingNode {
						return fmt.Errorf("config file %s line %d: every item of %s must be a block of keys", f.Path, item.Line, key)
					}
					if err := f.flatten(fmt.Sprintf("%s.%d", key, i), item, depth+1); err != nil {
						return err
					}
				}
				continue
			}
			fv := fileValue{isList: true, line: v.Line, list: []string{}}
			for _, item := range v.Content {
				if item.Kind != yaml.ScalarNode {
					return fmt.Errorf("config file %s line %d: %s must be a list of plain values", f.Path, item.Line, key)
				}
				fv.list = append(fv.list, item.Value)
			}
			f.values[key] = fv
		case yaml.ScalarNode:
			if v.Tag == "!!null" {
				continue // "key:" with no value: as if absent
			}
			f.values[key] = fileValue{scalar: v.Value, line: v.Line}
		default:
			return fmt.Errorf("config file %s line %d: %s has a value of a kind this server does not read (anchors and aliases are not accepted)", f.Path, v.Line, key)
		}
	}
	return nil
}

// Scalar returns the key's value and marks the key as known.
func (f *File) Scalar(key string) (value string, where string, ok bool, err error) {
	if f == nil {
		return "", "", false, nil
	}
	f.used[key] = true
	v, ok := f.values[key]
	if !ok {
		return "", "", false, nil
	}
	where = fmt.Sprintf("%s line %d", f.Path, v.line)
	if v.isList {
		return "", where, false, fmt.Errorf("%s: %s must be a single value, not a list", where, key)
	}
	return v.scalar, where, true, nil
}

// List returns the key's list (a single value counts as a list of one).
func (f *File) List(key string) ([]string, bool) {
	if f == nil {
		return nil, false
	}
	f.used[key] = true
	v, ok := f.values[key]
	if !ok {
		return nil, false
	}
	if !v.isList {
		return []string{v.scalar}, true
	}
	return v.list, true
}

// Has reports whether the file sets key or any key below it.
func (f *File) Has(key string) bool {
	if f == nil {
		return false
	}
	for k := range f.values {
		if k == key || strings.HasPrefix(k, key+".") {
			return true
		}
	}
	return false
}

// Unknown reports every key in the file that no reader asked for.
func (f *File) Unknown() error {
	if f == nil {
		return nil
	}
	var bad []string
	for k, v := range f.values {
		if !f.used[k] {
			bad = append(bad, fmt.Sprintf("%s (line %d)", k, v.line))
		}
	}
	if len(bad) == 0 {
		return nil
	}
	slices.Sort(bad)
	known := make([]string, 0, len(f.used))
	for k := range f.used {
		known = append(known, k)
	}
	slices.Sort(known)
	return errors.New("config file " + f.Path + ": unknown key(s) " + strings.Join(bad, ", ") +
		"; accepted keys: " + strings.Join(known, ", "))
}
