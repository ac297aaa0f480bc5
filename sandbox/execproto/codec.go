package execproto

import (
	"encoding/binary"
	"errors"
)

// The messages are encoded as uvarints and length-prefixed byte strings, in
// field order.

var errMalformed = errors.New("malformed message")

type enc struct{ b []byte }

func (e *enc) uint(v uint64)   { e.b = binary.AppendUvarint(e.b, v) }
func (e *enc) bytes(p []byte)  { e.uint(uint64(len(p))); e.b = append(e.b, p...) }
func (e *enc) string(s string) { e.uint(uint64(len(s))); e.b = append(e.b, s...) }
func (e *enc) bool(v bool) {
	if v {
		e.uint(1)
	} else {
		e.uint(0)
	}
}
func (e *enc) strings(ss []string) {
	e.uint(uint64(len(ss)))
	for _, s := range ss {
		e.string(s)
	}
}

type dec struct {
	b   []byte
	err error
}

func (d *dec) uint() uint64 {
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.err = errMalformed
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *dec) bytes() []byte {
	n := d.uint()
	if d.err != nil || n > uint64(len(d.b)) {
		d.err = errMalformed
		return nil
	}
	p := d.b[:n:n]
	d.b = d.b[n:]
	return p
}

func (d *dec) string() string { return string(d.bytes()) }
func (d *dec) bool() bool     { return d.uint() != 0 }

func (d *dec) strings() []string {
	n := d.uint()
	if d.err != nil || n > uint64(len(d.b)) {
		d.err = errMalformed
		return nil
	}
	ss := make([]string, 0, n)
	for range n {
		ss = append(ss, d.string())
	}
	return ss
}

func (d *dec) end() error {
	if d.err == nil && len(d.b) != 0 {
		d.err = errMalformed
	}
	return d.err
}

func (m ExecMsg) Marshal() []byte {
	var e enc
	e.strings(m.Argv)
	e.strings(m.Env)
	e.string(m.Dir)
	e.bytes(m.Stdin)
	e.uint(uint64(m.Limit))
	e.bool(m.Join)
	e.bool(m.User)
	e.uint(uint64(m.UID))
	e.uint(uint64(m.GID))
	e.string(m.Spec)
	e.bool(m.Service)
	e.uint(uint64(m.Armed))
	return e.b
}

func (m *ExecMsg) Unmarshal(b []byte) error {
	d := dec{b: b}
	m.Argv, m.Env, m.Dir, m.Stdin = d.strings(), d.strings(), d.string(), d.bytes()
	m.Limit, m.Join = int(d.uint()), d.bool()
	m.User, m.UID, m.GID = d.bool(), int(d.uint()), int(d.uint())
	m.Spec, m.Service = d.string(), d.bool()
	m.Armed = uint32(d.uint())
	return d.end()
}

func (m JoinMsg) Marshal() []byte {
	var e enc
	e.uint(uint64(m.Tid))
	return e.b
}

func (m *JoinMsg) Unmarshal(b []byte) error {
	d := dec{b: b}
	m.Tid = int(d.uint())
	return d.end()
}

func (m ExitMsg) Marshal() []byte {
	var e enc
	e.uint(uint64(m.Code))
	e.string(m.Setup)
	return e.b
}

func (m *ExitMsg) Unmarshal(b []byte) error {
	d := dec{b: b}
	m.Code, m.Setup = int(d.uint()), d.string()
	return d.end()
}

func (m DoneMsg) Marshal() []byte {
	var e enc
	e.bool(m.TruncatedStdout)
	e.bool(m.TruncatedStderr)
	e.uint(uint64(len(m.Denials)))
	for _, dn := range m.Denials {
		e.string(dn.Kind)
		e.uint(uint64(dn.Syscall + 1)) // -1 (the overflow entry) is 0
		e.string(dn.Detail)
		e.uint(uint64(dn.Count))
	}
	return e.b
}

func (m *DoneMsg) Unmarshal(b []byte) error {
	d := dec{b: b}
	m.TruncatedStdout, m.TruncatedStderr = d.bool(), d.bool()
	n := d.uint()
	if n > uint64(len(d.b)) {
		return errMalformed
	}
	m.Denials = nil
	for range n {
		var dn Denial
		dn.Kind = d.string()
		dn.Syscall = int(d.uint()) - 1
		dn.Detail = d.string()
		dn.Count = int(d.uint())
		m.Denials = append(m.Denials, dn)
	}
	return d.end()
}

func (m FileMsg) Marshal() []byte {
	var e enc
	e.bool(m.Write)
	e.string(m.Path)
	e.bytes(m.Data)
	e.uint(uint64(m.Mode))
	e.uint(uint64(m.Max))
	e.bool(m.Chown)
	e.uint(uint64(m.UID))
	e.uint(uint64(m.GID))
	return e.b
}

func (m *FileMsg) Unmarshal(b []byte) error {
	d := dec{b: b}
	m.Write, m.Path, m.Data = d.bool(), d.string(), d.bytes()
	m.Mode, m.Max = uint32(d.uint()), int(d.uint())
	m.Chown, m.UID, m.GID = d.bool(), int(d.uint()), int(d.uint())
	return d.end()
}

func (m FileResult) Marshal() []byte {
	var e enc
	e.bytes(m.Data)
	e.uint(uint64(m.Errno))
	e.string(m.Err)
	return e.b
}

func (m *FileResult) Unmarshal(b []byte) error {
	d := dec{b: b}
	m.Data, m.Errno, m.Err = d.bytes(), int(d.uint()), d.string()
	return d.end()
}
