// Package helper is the pod rung's in-pod helper and the wire format the
// rung speaks to it. The helper is a static binary an init container copies
// into an emptyDir that the sandbox container mounts read-only at Dir; the
// container's own image may have no shell. Its modes:
//
//	init DIR     the container's pid 1: makes the workdir, reaps orphans, sleeps
//	run          one call (exec, service, read, write) per pod exec
//
// A call's request comes first on the exec's stdin (a 4-byte big-endian
// length, then JSON), followed by the command's stdin or the file's bytes;
// everything the helper says comes back on stdout as frames: kind (1 byte),
// payload length (4 bytes, big-endian), payload. The helper never trusts the
// sandbox (commands run as root inside can write to its stdout), so the rung
// bounds what it reads too.
package helper

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"
)

// Dir is where the helper is mounted in the sandbox container; Path is the
// binary there.
const (
	Dir  = "/.evalsi"
	Path = Dir + "/evalsi-pod-helper"
)

// Ops.
const (
	OpExec    = "exec"
	OpService = "service"
	OpRead    = "read"
	OpWrite   = "write"
)

// Frame kinds.
const (
	FrameStdout    = 'o'
	FrameStderr    = 'e'
	FrameHeartbeat = 'h' // so the helper notices a client that has gone away
	FrameResult    = 'r'
)

// MaxFrame bounds one frame's payload.
const MaxFrame = 1 << 20

// Request is one call.
type Request struct {
	Op   string   `json:"op"`
	Argv []string `json:"argv,omitempty"`
	// Env is the command's whole environment (sandbox.CommandEnv); HOME is
	// added from passwd when it sets none.
	Env     []string      `json:"env,omitempty"`
	Workdir string        `json:"workdir,omitempty"`
	User    string        `json:"user,omitempty"`
	Timeout time.Duration `json:"timeout,omitempty"`
	// OutputLimit caps stdout and stderr each (0: no cap, for services).
	OutputLimit int `json:"output_limit,omitempty"`
	FileSizeMB  int `json:"file_size_mb,omitempty"`
	// Stdin says whether bytes follow the request (the command's stdin).
	Stdin bool   `json:"stdin,omitempty"`
	Path  string `json:"path,omitempty"`
	Mode  uint32 `json:"mode,omitempty"`
}

// Result is how a call ended.
type Result struct {
	ExitCode  int    `json:"exit_code"`
	TimedOut  bool   `json:"timed_out,omitempty"`
	Truncated bool   `json:"truncated,omitempty"`
	Signal    string `json:"signal,omitempty"`
	OOMKills  int    `json:"oom_kills,omitempty"`
	// Error is a failure of the call itself (the user does not exist, the
	// file cannot be read), not of the command; NotExist marks ENOENT.
	Error    string `json:"error,omitempty"`
	NotExist bool   `json:"not_exist,omitempty"`
}

// WriteRequest writes the request header.
func WriteRequest(w io.Writer, req Request) error {
	b, err := json.Marshal(req)
	if err != nil {
		return err
	}
	var n [4]byte
	binary.BigEndian.PutUint32(n[:], uint32(len(b)))
	if _, err := w.Write(n[:]); err != nil {
		return err
	}
	_, err = w.Write(b)
	return err
}

// ReadRequest reads the request header.
func ReadRequest(r io.Reader) (Request, error) {
	var req Request
	var n [4]byte
	if _, err := io.ReadFull(r, n[:]); err != nil {
		return req, fmt.Errorf("reading the request: %w", err)
	}
	size := binary.BigEndian.Uint32(n[:])
	if size > MaxFrame {
		return req, fmt.Errorf("request of %d bytes, more than %d", size, MaxFrame)
	}
	b := make([]byte, size)
	if _, err := io.ReadFull(r, b); err != nil {
		return req, fmt.Errorf("reading the request: %w", err)
	}
	return req, json.Unmarshal(b, &req)
}

// WriteFrame writes one frame.
func WriteFrame(w io.Writer, kind byte, p []byte) error {
	var h [5]byte
	h[0] = kind
	binary.BigEndian.PutUint32(h[1:], uint32(len(p)))
	if _, err := w.Write(h[:]); err != nil {
		return err
	}
	_, err := w.Write(p)
	return err
}

// ErrFrame is wrapped when the stream is not the helper's frames.
var ErrFrame = errors.New("malformed helper frame")

// ReadFrame reads one frame into buf's storage (grown as needed).
func ReadFrame(r io.Reader, buf []byte) (kind byte, p []byte, err error) {
	var h [5]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return 0, nil, err
	}
	n := binary.BigEndian.Uint32(h[1:])
	if n > MaxFrame {
		return 0, nil, fmt.Errorf("%w: %d bytes", ErrFrame, n)
	}
	if cap(buf) < int(n) {
		buf = make([]byte, n)
	}
	p = buf[:n]
	if _, err := io.ReadFull(r, p); err != nil {
		return 0, nil, fmt.Errorf("%w: %v", ErrFrame, err)
	}
	return h[0], p, nil
}
