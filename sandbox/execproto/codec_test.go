package execproto

import (
	"bufio"
	"bytes"
	"reflect"
	"testing"
)

func TestMessagesRoundTrip(t *testing.T) {
	exec := ExecMsg{Argv: []string{"sh", "-c", "echo ü"}, Env: []string{"A=1", "PATH=/bin"}, Dir: "/workspace/a b", Stdin: []byte{0, 1, 2}, Limit: 1 << 20, Join: true, Spec: "agent:staff", Service: true}
	var gotExec ExecMsg
	if err := gotExec.Unmarshal(exec.Marshal()); err != nil || !reflect.DeepEqual(gotExec, exec) {
		t.Errorf("ExecMsg: %+v, %v; want %+v", gotExec, err, exec)
	}
	exit := ExitMsg{Code: 137, Setup: "workdir missing"}
	var gotExit ExitMsg
	if err := gotExit.Unmarshal(exit.Marshal()); err != nil || gotExit != exit {
		t.Errorf("ExitMsg: %+v, %v; want %+v", gotExit, err, exit)
	}
	for _, done := range []DoneMsg{{TruncatedStderr: true}, {Denials: []Denial{
		{Kind: "syscall", Syscall: 165, Count: 2}, {Kind: "network", Syscall: 0, Detail: "connect to 198.18.1.2:80", Count: 1}, {Kind: "network", Syscall: -1, Count: 7}}}} {
		var gotDone DoneMsg
		if err := gotDone.Unmarshal(done.Marshal()); err != nil || !reflect.DeepEqual(gotDone, done) {
			t.Errorf("DoneMsg: %+v, %v; want %+v", gotDone, err, done)
		}
	}
	join := JoinMsg{Tid: 4242}
	var gotJoin JoinMsg
	if err := gotJoin.Unmarshal(join.Marshal()); err != nil || gotJoin != join {
		t.Errorf("JoinMsg: %+v, %v; want %+v", gotJoin, err, join)
	}
}

func TestMalformedMessages(t *testing.T) {
	full := ExecMsg{Argv: []string{"true"}, Dir: "/w", Limit: 10}.Marshal()
	for _, b := range [][]byte{nil, full[:len(full)-1], append(full, 0), {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}, {5, 1, 'a'}} {
		var m ExecMsg
		if err := m.Unmarshal(b); err == nil {
			t.Errorf("Unmarshal(%v) = %+v, nil; want an error", b, m)
		}
	}
}

func TestFrames(t *testing.T) {
	var buf bytes.Buffer
	if err := WriteFrame(&buf, FrameStdout, 7, []byte("hello")); err != nil {
		t.Fatal(err)
	}
	if err := WriteFrame(&buf, FrameDone, 8, nil); err != nil {
		t.Fatal(err)
	}
	r := bufio.NewReader(&buf)
	for _, want := range []struct {
		kind byte
		id   uint32
		p    string
	}{{FrameStdout, 7, "hello"}, {FrameDone, 8, ""}} {
		kind, id, p, err := ReadFrame(r)
		if err != nil || kind != want.kind || id != want.id || string(p) != want.p {
			t.Errorf("frame: %c %d %q %v; want %c %d %q", kind, id, p, err, want.kind, want.id, want.p)
		}
	}
	if _, _, _, err := ReadFrame(r); err == nil {
		t.Errorf("reading past the last frame: no error")
	}
}

func TestParseSockaddr(t *testing.T) {
	in4 := []byte{2, 0, 0, 80, 198, 18, 1, 2, 0, 0, 0, 0, 0, 0, 0, 0}
	in6 := append([]byte{10, 0, 0, 53, 0, 0, 0, 0}, make([]byte, 20)...)
	in6[8], in6[9], in6[23] = 0x20, 0x01, 1
	unixAddr := append([]byte{1, 0}, "/tmp/s\x00"...)
	for _, c := range []struct {
		b    []byte
		want string
		ok   bool
	}{
		{in4, "198.18.1.2:80", true},
		{in6, "[2001::1]:53", true},
		{unixAddr, "", false},
		{in4[:6], "", false},
		{nil, "", false},
	} {
		got, ok := parseSockaddr(c.b)
		if ok != c.ok || (ok && got.String() != c.want) {
			t.Errorf("parseSockaddr(%v) = %v, %v; want %s, %v", c.b, got, ok, c.want, c.ok)
		}
	}
}
