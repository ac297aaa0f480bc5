package swebench

import (
	"encoding/xml"
	"errors"
	"fmt"
	"io"
	"strings"
)

// element is the part of Python's xml.etree.ElementTree the XML log
// parsers use: a tag, attributes and children in document order.
type element struct {
	tag      string // "{namespace}local" when namespaced, as ElementTree writes it
	attrs    map[string]string
	children []*element
}

// etreeFromString is ET.fromstring: one root element, nothing but
// whitespace, comments and processing instructions around it, the XML
// declaration only first; anything else is a parse error, as with expat.
func etreeFromString(s string) (*element, error) {
	d := xml.NewDecoder(strings.NewReader(s))
	d.Strict = true
	var root *element
	var stack []*element
	first := true
	for {
		tok, err := d.Token()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("parsing XML: %w", err)
		}
		switch t := tok.(type) {
		case xml.ProcInst:
			if t.Target == "xml" && !first {
				return nil, errors.New("parsing XML: XML declaration not at start of document")
			}
		case xml.StartElement:
			if root != nil && len(stack) == 0 {
				return nil, errors.New("parsing XML: junk after document element")
			}
			e := &element{tag: t.Name.Local, attrs: map[string]string{}}
			if t.Name.Space != "" {
				e.tag = "{" + t.Name.Space + "}" + t.Name.Local
			}
			for _, a := range t.Attr {
				if a.Name.Space == "xmlns" || (a.Name.Space == "" && a.Name.Local == "xmlns") {
					continue
				}
				e.attrs[a.Name.Local] = a.Value
			}
			if len(stack) > 0 {
				p := stack[len(stack)-1]
				p.children = append(p.children, e)
			} else {
				root = e
			}
			stack = append(stack, e)
		case xml.EndElement:
			stack = stack[:len(stack)-1]
		case xml.CharData:
			if len(stack) == 0 && strings.TrimSpace(string(t)) != "" {
				return nil, errors.New("parsing XML: text outside the document element")
			}
		}
		first = false
	}
	if root == nil {
		return nil, errors.New("parsing XML: no element found")
	}
	if len(stack) > 0 {
		return nil, errors.New("parsing XML: unclosed element " + stack[len(stack)-1].tag)
	}
	return root, nil
}

// descendants is findall(".//tag"): every element below e (not e itself)
// named tag, in document order.
func (e *element) descendants(tag string) []*element {
	var out []*element
	var walk func(*element)
	walk = func(n *element) {
		for _, c := range n.children {
			if c.tag == tag {
				out = append(out, c)
			}
			walk(c)
		}
	}
	walk(e)
	return out
}

// get is element.get(name, default).
func (e *element) get(name, def string) string {
	if v, ok := e.attrs[name]; ok {
		return v
	}
	return def
}
