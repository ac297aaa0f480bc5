// Package pgtest gives tests a real PostgreSQL: one throwaway cluster per
// test binary, made with the host's initdb in a temporary directory and
// listening only on 127.0.0.1 (and a unix socket in that directory), with a
// fresh database per test. Test support only.
//
// A package that uses it calls Main from its TestMain, which starts nothing
// until a test asks, and stops the cluster and removes its directory when
// the tests are done:
//
//	func TestMain(m *testing.M) { pgtest.Main(m) }
//
//	func TestX(t *testing.T) { dsn := pgtest.Start(t); ... }
//
// The binaries are Debian's (/usr/lib/postgresql/15/bin, package
// postgresql, which .ci/setup installs); $EVALSI_PG_BIN names another
// directory. Without them Start skips, or fails under EVALSI_STRICT=1.
package pgtest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"evals.si/internal/testenv"
)

// superuser is the cluster's database superuser; trust auth lets it in
// without a password (the cluster listens on loopback only, and only for
// the test binary's lifetime).
const superuser = "evalsi"

// startTimeout bounds how long the server may take to accept connections.
const startTimeout = 60 * time.Second

// cluster is the test binary's one cluster.
type cluster struct {
	dir  string // temporary directory: data/, the socket, the log
	port int
	cmd  *exec.Cmd
	exit chan struct{} // closed when the server process has exited
	err  error         // why the cluster could not start
	dbs  atomic.Int64  // databases created so far, for their names
}

var (
	mainCalled atomic.Bool
	once       sync.Once
	the        *cluster
)

// Main runs the package's tests and then stops the cluster, if one was
// started, and removes its files. Call it from TestMain.
func Main(m *testing.M) {
	mainCalled.Store(true)
	code := m.Run()
	if the != nil {
		the.stop()
	}
	os.Exit(code)
}

// Start returns the DSN (key=value form) of a new, empty database in the
// test binary's cluster, starting the cluster first if this is the first
// call. The database is dropped when the test ends; close every connection
// to it in an earlier cleanup (t.Cleanup runs last-registered first, so a
// store opened after Start and closed in its own cleanup is fine).
func Start(t testing.TB) string {
	t.Helper()
	if !mainCalled.Load() {
		t.Fatal("pgtest.Start needs pgtest.Main: add func TestMain(m *testing.M) { pgtest.Main(m) } to the package's tests")
	}
	bin, err := binDir()
	if err != nil {
		testenv.Missing(t, "PostgreSQL", err.Error())
	}
	once.Do(func() { the = startCluster(bin) })
	if the.err != nil {
		t.Fatalf("starting a PostgreSQL cluster for the tests: %v", the.err)
	}
	ctx := context.Background()
	name := fmt.Sprintf("test_%d", the.dbs.Add(1))
	conn, err := pgx.Connect(ctx, the.dsn("postgres"))
	if err != nil {
		t.Fatalf("connecting to the test cluster: %v", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()); err != nil {
		t.Fatalf("creating test database %s: %v", name, err)
	}
	t.Cleanup(func() {
		conn, err := pgx.Connect(ctx, the.dsn("postgres"))
		if err != nil {
			t.Errorf("connecting to the test cluster to drop %s: %v", name, err)
			return
		}
		defer conn.Close(ctx)
		// FORCE: a connection the test left open must not keep it.
		if _, err := conn.Exec(ctx, "DROP DATABASE "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
			t.Errorf("dropping test database %s: %v", name, err)
		}
	})
	return the.dsn(name)
}

func (c *cluster) dsn(db string) string {
	return fmt.Sprintf("host=127.0.0.1 port=%d user=%s dbname=%s sslmode=disable", c.port, superuser, db)
}

// binDir finds initdb and postgres.
func binDir() (string, error) {
	dirs := []string{os.Getenv("EVALSI_PG_BIN"), "/usr/lib/postgresql/15/bin"}
	for _, d := range dirs {
		if d == "" {
			continue
		}
		if isExec(filepath.Join(d, "initdb")) && isExec(filepath.Join(d, "postgres")) {
			return d, nil
		}
	}
	return "", errors.New("initdb and postgres not found in /usr/lib/postgresql/15/bin or $EVALSI_PG_BIN; apt-get install postgresql (.ci/setup)")
}

func isExec(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0
}

func startCluster(bin string) *cluster {
	c := &cluster{exit: make(chan struct{})}
	if err := c.start(bin); err != nil {
		c.err = err
		c.stop()
	}
	return c
}

func (c *cluster) start(bin string) error {
	// initdb and postgres refuse to run as root: as root, run them as the
	// postgres user the package created.
	cred, err := serverUser()
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "evalsi-pgtest-")
	if err != nil {
		return err
	}
	c.dir = dir
	if cred != nil {
		if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
			return fmt.Errorf("handing %s to the postgres user: %w", dir, err)
		}
	}
	data := filepath.Join(dir, "data")
	initdb := exec.Command(filepath.Join(bin, "initdb"), "-D", data, "-U", superuser, "--auth=trust",
		"-E", "UTF8", "--locale=C", "--no-sync")
	initdb.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	initdb.Dir = dir
	if out, err := initdb.CombinedOutput(); err != nil {
		return fmt.Errorf("initdb: %w\n%s", err, out)
	}

	// A free port, found by binding and releasing it; another process
	// could take it in between, so a failed start tries a new one.
	var lastErr error
	for range 3 {
		port, err := freePort()
		if err != nil {
			return err
		}
		c.port = port
		if lastErr = c.run(bin, data, cred); lastErr == nil {
			return nil
		}
	}
	return lastErr
}

func (c *cluster) run(bin, data string, cred *syscall.Credential) error {
	logPath := filepath.Join(c.dir, "postgres.log")
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close()
	// Durability is not under test here: fsync off makes CREATE DATABASE
	// and commits fast.
	cmd := exec.Command(filepath.Join(bin, "postgres"), "-D", data,
		"-c", "listen_addresses=127.0.0.1", "-p", strconv.Itoa(c.port),
		"-c", "unix_socket_directories="+c.dir,
		"-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off",
		"-c", "max_connections=200")
	cmd.Stdout, cmd.Stderr = logf, logf
	// Pdeathsig: should the test binary die without Main's cleanup, the
	// server goes with it (SIGQUIT is its immediate shutdown).
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Pdeathsig: syscall.SIGQUIT}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting postgres: %w", err)
	}
	exit := make(chan struct{})
	go func() { cmd.Wait(); close(exit) }()
	c.cmd, c.exit = cmd, exit

	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	for {
		conn, err := pgx.Connect(ctx, c.dsn("postgres"))
		if err == nil {
			conn.Close(ctx)
			return nil
		}
		select {
		case <-exit:
			log, _ := os.ReadFile(logPath)
			return fmt.Errorf("postgres exited at start (%v); its log:\n%s", cmd.ProcessState, log)
		case <-ctx.Done():
			c.kill()
			log, _ := os.ReadFile(logPath)
			return fmt.Errorf("postgres did not accept connections within %s: %v; its log:\n%s", startTimeout, err, log)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// kill shuts the server down fast (SIGQUIT: no checkpoint, which a
// throwaway cluster does not need) and waits for it.
func (c *cluster) kill() {
	if c.cmd == nil || c.cmd.Process == nil {
		return
	}
	c.cmd.Process.Signal(syscall.SIGQUIT)
	select {
	case <-c.exit:
	case <-time.After(30 * time.Second):
		c.cmd.Process.Kill()
		<-c.exit
	}
	c.cmd = nil
}

func (c *cluster) stop() {
	c.kill()
	if c.dir != "" {
		os.RemoveAll(c.dir)
	}
}

// serverUser is who runs initdb and postgres: nil (this process's user)
// unless this process is root, then the postgres user.
func serverUser() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("running as root, PostgreSQL needs an unprivileged user to run as: %w (the postgresql package creates postgres)", err)
	}
	uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
	gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
	if err := errors.Join(err1, err2); err != nil {
		return nil, fmt.Errorf("user postgres: %w", err)
	}
	// No supplementary groups: root's must not come along.
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}}, nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("finding a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
