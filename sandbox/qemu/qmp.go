package qemu

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"syscall"
	"time"
)

// qmp is a client of QEMU's machine protocol over its unix socket: JSON
// objects one per line, a greeting, then commands answered in order, with
// asynchronous events interleaved. Commands are issued one at a time (mu);
// the replies are read by the issuing call itself, so there is no reader
// goroutine to stop, and events read on the way are kept for waitEvent.
type qmp struct {
	conn *net.UnixConn
	r    *bufio.Reader

	mu     sync.Mutex
	events []qmpEvent
}

// qmpEvent is one asynchronous message (SHUTDOWN, STOP, RESUME…).
type qmpEvent struct {
	Event string          `json:"event"`
	Data  json.RawMessage `json:"data"`
}

// qmpMessage is any message QEMU sends: a greeting, a reply or an event.
type qmpMessage struct {
	QMP    json.RawMessage `json:"QMP"`
	Return json.RawMessage `json:"return"`
	Error  *struct {
		Class string `json:"class"`
		Desc  string `json:"desc"`
	} `json:"error"`
	Event string          `json:"event"`
	Data  json.RawMessage `json:"data"`
}

// qmpError is QEMU's refusal of a command.
type qmpError struct {
	Command, Class, Desc string
}

func (e *qmpError) Error() string {
	return fmt.Sprintf("qemu refused %s: %s (%s)", e.Command, e.Desc, e.Class)
}

// newQMP is a client on conn, the engine's end of the socket pair whose
// other end QEMU's monitor was started on. Nothing is read yet: start
// reads the greeting.
func newQMP(conn *net.UnixConn) *qmp {
	return &qmp{conn: conn, r: bufio.NewReaderSize(conn, 64<<10)}
}

// start reads QEMU's greeting and leaves negotiation mode. QEMU greets as
// soon as its monitor is up, but answers commands from its main loop,
// once the machine is built (its kernel loaded, its disks open): so when
// start returns, QEMU has everything it needed the engine's files for. If
// QEMU exits first, the socket ends (the engine holds no copy of QEMU's
// end).
func (q *qmp) start(ctx context.Context) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	stop := q.bound(ctx)
	defer stop()
	m, err := q.read()
	if err == nil && m.QMP != nil {
		_, err = q.executeLocked("qmp_capabilities", nil, nil)
	}
	if ctx.Err() != nil {
		return fmt.Errorf("qmp: starting the session: %w", context.Cause(ctx))
	}
	if errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) {
		return errors.New("qmp: qemu closed its monitor while starting (it exited)")
	}
	if err != nil {
		return fmt.Errorf("qmp: starting the session: %w", err)
	}
	if m.QMP == nil {
		return fmt.Errorf("qmp: expected the QMP greeting, got %+v", m)
	}
	return nil
}

// bound makes reads and writes on the connection fail once ctx is done;
// the returned func undoes it. A command cut short this way leaves its
// reply unread, so the callers kill the machine rather than reuse the
// connection.
func (q *qmp) bound(ctx context.Context) func() {
	stop := context.AfterFunc(ctx, func() { q.conn.SetDeadline(time.Unix(1, 0)) })
	return func() {
		if !stop() {
			q.conn.SetDeadline(time.Time{})
		}
	}
}

// read returns the next message.
func (q *qmp) read() (qmpMessage, error) {
	line, err := q.r.ReadBytes('\n')
	if err != nil {
		return qmpMessage{}, err
	}
	var m qmpMessage
	if err := json.Unmarshal(line, &m); err != nil {
		return qmpMessage{}, fmt.Errorf("bad qmp message %q: %w", line, err)
	}
	return m, nil
}

// execute runs cmd with args (nil for none) and decodes its return value
// into out (nil to ignore it).
func (q *qmp) execute(ctx context.Context, cmd string, args, out any) error {
	return q.executeFile(ctx, cmd, args, out, nil)
}

// executeFile runs cmd, passing f's descriptor with it (SCM_RIGHTS): the
// way getfd receives a file QEMU then names in a fd: URI, so QEMU never
// opens the path itself.
func (q *qmp) executeFile(ctx context.Context, cmd string, args, out any, f *os.File) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	stop := q.bound(ctx)
	defer stop()
	ret, err := q.executeLocked(cmd, args, f)
	if err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("qmp %s: %w", cmd, context.Cause(ctx))
		}
		return err
	}
	if out != nil {
		if err := json.Unmarshal(ret, out); err != nil {
			return fmt.Errorf("qmp %s: decoding %s: %w", cmd, ret, err)
		}
	}
	return nil
}

func (q *qmp) executeLocked(cmd string, args any, f *os.File) (json.RawMessage, error) {
	req := map[string]any{"execute": cmd}
	if args != nil {
		req["arguments"] = args
	}
	b, err := json.Marshal(req)
	if err != nil {
		return nil, fmt.Errorf("qmp %s: %w", cmd, err)
	}
	b = append(b, '\n')
	if f != nil {
		_, _, err = q.conn.WriteMsgUnix(b, syscall.UnixRights(int(f.Fd())), nil)
	} else {
		_, err = q.conn.Write(b)
	}
	if err != nil {
		return nil, fmt.Errorf("qmp %s: sending: %w", cmd, err)
	}
	for {
		m, err := q.read()
		if err != nil {
			return nil, fmt.Errorf("qmp %s: reading the reply: %w", cmd, err)
		}
		switch {
		case m.Event != "":
			q.events = append(q.events, qmpEvent{Event: m.Event, Data: m.Data})
		case m.Error != nil:
			return nil, &qmpError{Command: cmd, Class: m.Error.Class, Desc: m.Error.Desc}
		case m.Return != nil:
			return m.Return, nil
		}
	}
}

// waitEvent returns the first event named name, from those seen so far
// or the next ones.
func (q *qmp) waitEvent(ctx context.Context, name string) (qmpEvent, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for {
		for i, e := range q.events {
			if e.Event == name {
				q.events = append(q.events[:i:i], q.events[i+1:]...)
				return e, nil
			}
		}
		stop := q.bound(ctx)
		m, err := q.read()
		stop()
		if err != nil {
			if ctx.Err() != nil {
				return qmpEvent{}, fmt.Errorf("qmp: waiting for %s: %w", name, context.Cause(ctx))
			}
			return qmpEvent{}, fmt.Errorf("qmp: waiting for %s: %w", name, err)
		}
		if m.Event != "" {
			q.events = append(q.events, qmpEvent{Event: m.Event, Data: m.Data})
		}
	}
}

func (q *qmp) Close() error { return q.conn.Close() }

// migrationStatus is the part of query-migrate's answer a save and a
// restore wait on.
type migrationStatus struct {
	Status    string `json:"status"`
	ErrorDesc string `json:"error-desc"`
	TotalTime int64  `json:"total-time"`
	RAM       *struct {
		Transferred int64 `json:"transferred"`
	} `json:"ram"`
}

// waitMigration polls query-migrate until the migration (outgoing or
// incoming) completes or fails. QEMU 7.2 reports no progress otherwise
// without the events capability, and polling every few milliseconds costs
// nothing next to the transfer.
func (q *qmp) waitMigration(ctx context.Context) (migrationStatus, error) {
	for {
		var st migrationStatus
		if err := q.execute(ctx, "query-migrate", nil, &st); err != nil {
			return st, err
		}
		switch st.Status {
		case "completed":
			return st, nil
		case "failed", "cancelled":
			return st, fmt.Errorf("migration %s: %s", st.Status, st.ErrorDesc)
		}
		select {
		case <-ctx.Done():
			return st, fmt.Errorf("waiting for the migration (%s): %w", st.Status, context.Cause(ctx))
		case <-time.After(5 * time.Millisecond):
		}
	}
}
