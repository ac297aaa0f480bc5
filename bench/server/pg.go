package main

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
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// postgres is a PostgreSQL cluster of the bench's own: Debian's initdb in
// a temporary directory, listening on 127.0.0.1 only, trust auth for its
// one superuser (nothing else can reach it, and it lives as long as the
// bench). It follows internal/testenv/pgtest, which is tied to testing.TB.
type postgres struct {
	dir  string
	port int
	cmd  *exec.Cmd
	exit chan struct{}
}

const pgSuperuser = "evalsi"

// pgBinDir finds initdb and postgres: $EVALSI_PG_BIN, else Debian's.
func pgBinDir() (string, error) {
	for _, d := range []string{os.Getenv("EVALSI_PG_BIN"), "/usr/lib/postgresql/15/bin"} {
		if d == "" {
			continue
		}
		if isExec(filepath.Join(d, "initdb")) && isExec(filepath.Join(d, "postgres")) {
			return d, nil
		}
	}
	return "", errors.New("initdb and postgres not found in /usr/lib/postgresql/15/bin or $EVALSI_PG_BIN (apt-get install postgresql, or give --pg-dsn)")
}

func isExec(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0
}

// startPostgres makes and starts a cluster. durable keeps PostgreSQL's
// defaults (fsync, synchronous commit), as the embedded SQLite store keeps
// synchronous=FULL; without it commits do not wait for the disk.
func startPostgres(ctx context.Context, durable bool) (*postgres, error) {
	bin, err := pgBinDir()
	if err != nil {
		return nil, err
	}
	cred, err := pgUser()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "evalsi-bench-pg-")
	if err != nil {
		return nil, err
	}
	pg := &postgres{dir: dir}
	if err := pg.start(ctx, bin, cred, durable); err != nil {
		pg.stop()
		return nil, err
	}
	return pg, nil
}

func (pg *postgres) start(ctx context.Context, bin string, cred *syscall.Credential, durable bool) error {
	if cred != nil {
		if err := os.Chown(pg.dir, int(cred.Uid), int(cred.Gid)); err != nil {
			return fmt.Errorf("handing %s to the postgres user: %w", pg.dir, err)
		}
	}
	data := filepath.Join(pg.dir, "data")
	initdb := exec.CommandContext(ctx, filepath.Join(bin, "initdb"), "-D", data, "-U", pgSuperuser, "--auth=trust", "-E", "UTF8", "--locale=C")
	initdb.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	initdb.Dir = pg.dir
	if out, err := initdb.CombinedOutput(); err != nil {
		return fmt.Errorf("initdb: %w\n%s", err, out)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("finding a free port: %w", err)
	}
	pg.port = l.Addr().(*net.TCPAddr).Port
	l.Close()
	args := []string{"-D", data, "-c", "listen_addresses=127.0.0.1", "-p", strconv.Itoa(pg.port),
		"-c", "unix_socket_directories=" + pg.dir, "-c", "max_connections=200"}
	if !durable {
		args = append(args, "-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off")
	}
	logf, err := os.Create(filepath.Join(pg.dir, "postgres.log"))
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd := exec.Command(filepath.Join(bin, "postgres"), args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	// Should the bench die without stopping it, the server goes too
	// (SIGQUIT is its immediate shutdown).
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Pdeathsig: syscall.SIGQUIT}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting postgres: %w", err)
	}
	pg.cmd, pg.exit = cmd, make(chan struct{})
	go func() { cmd.Wait(); close(pg.exit) }()
	wait, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for {
		conn, err := pgx.Connect(wait, pg.dsn("postgres"))
		if err == nil {
			conn.Close(wait)
			return nil
		}
		select {
		case <-pg.exit:
			log, _ := os.ReadFile(filepath.Join(pg.dir, "postgres.log"))
			return fmt.Errorf("postgres exited at start: %s\n%s", cmd.ProcessState, log)
		case <-wait.Done():
			return fmt.Errorf("postgres did not accept connections within a minute: %w", err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func (pg *postgres) dsn(db string) string {
	return fmt.Sprintf("host=127.0.0.1 port=%d user=%s dbname=%s sslmode=disable", pg.port, pgSuperuser, db)
}

// pid is the postmaster's process id.
func (pg *postgres) pid() int { return pg.cmd.Process.Pid }

func (pg *postgres) stop() {
	if pg.cmd != nil && pg.cmd.Process != nil {
		pg.cmd.Process.Signal(syscall.SIGQUIT)
		select {
		case <-pg.exit:
		case <-time.After(30 * time.Second):
			pg.cmd.Process.Kill()
			<-pg.exit
		}
	}
	os.RemoveAll(pg.dir)
}

// pgUser is who runs initdb and postgres: this process's user unless it
// is root (PostgreSQL refuses root), then the postgres user.
func pgUser() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("running as root, PostgreSQL needs an unprivileged user: %w (the postgresql package creates postgres)", err)
	}
	uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
	gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
	if err := errors.Join(err1, err2); err != nil {
		return nil, fmt.Errorf("user postgres: %w", err)
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}}, nil
}
