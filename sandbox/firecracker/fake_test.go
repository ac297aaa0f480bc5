package firecracker

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The fake Firecracker: the test binary, run through a symlink named
// firecracker (or jailer), serves Firecracker's API on its --api-sock,
// validating every request against the vendored swagger and keeping the
// state a real Firecracker keeps (pre-boot configuration, running,
// paused, snapshot files), and plays the guest's side of the hybrid vsock.
// The VMM starts Firecracker with an empty environment, so the fake finds
// its configuration in fake.json next to the symlink.

func TestMain(m *testing.M) {
	switch filepath.Base(os.Args[0]) {
	case "firecracker":
		os.Exit(fakeFirecracker(os.Args[1:], false, nil, nil))
	case "jailer":
		os.Exit(fakeJailer(os.Args[1:]))
	}
	os.Exit(m.Run())
}

// fakeConfig is fake.json.
type fakeConfig struct {
	// Swagger is the API description's absolute path.
	Swagger string `json:"swagger"`
	// Faults answers "METHOD /path" with a 400 and this fault_message.
	Faults map[string]string `json:"faults,omitempty"`
	// Crash makes the process exit 1 on "METHOD /path".
	Crash string `json:"crash,omitempty"`
	// ListenAfterMS is how long after InstanceStart the guest starts
	// listening on the control port; NeverListen, never.
	ListenAfterMS int  `json:"listen_after_ms,omitempty"`
	NeverListen   bool `json:"never_listen,omitempty"`
	// FloodBytes makes the guest, once started, write that many bytes to
	// its serial console (Firecracker's stdout), spread over FloodMS.
	FloodBytes int `json:"flood_bytes,omitempty"`
	FloodMS    int `json:"flood_ms,omitempty"`
}

// fakeBins makes the firecracker and jailer symlinks with cfg.
func fakeBins(t *testing.T, cfg fakeConfig) (firecracker, jailer string) {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if cfg.Swagger, err = filepath.Abs(swaggerPath); err != nil {
		t.Fatal(err)
	}
	data, _ := json.Marshal(cfg)
	if err := os.WriteFile(filepath.Join(dir, "fake.json"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	firecracker, jailer = filepath.Join(dir, "firecracker"), filepath.Join(dir, "jailer")
	for _, p := range []string{firecracker, jailer} {
		if err := os.Symlink(exe, p); err != nil {
			t.Fatal(err)
		}
	}
	return firecracker, jailer
}

type fake struct {
	cfg    fakeConfig
	spec   *apiSpec
	jailed bool

	mu        sync.Mutex
	touched   bool // any configuration: snapshot/load is refused after it
	state     string
	boot      *bootSource
	drives    map[string]drive
	order     []string
	vsock     *vsockDevice
	vsockLn   net.Listener
	listening bool
	bootID    string
	restored  bool
}

// faultError is an API error the fake answers with.
type faultError struct {
	status int
	msg    string
	exit   bool // Firecracker ends after a failed snapshot load
}

func (e *faultError) Error() string { return e.msg }

func fault(format string, args ...any) *faultError {
	return &faultError{status: http.StatusBadRequest, msg: fmt.Sprintf(format, args...)}
}

// loadFake reads fake.json next to the symlink the process runs as, and
// the API description it names.
func loadFake() (fakeConfig, *apiSpec, error) {
	var cfg fakeConfig
	data, err := os.ReadFile(filepath.Join(filepath.Dir(os.Args[0]), "fake.json"))
	if err != nil {
		return cfg, nil, err
	}
	if err := json.Unmarshal(data, &cfg); err != nil {
		return cfg, nil, err
	}
	spec, err := loadAPISpec(cfg.Swagger)
	return cfg, spec, err
}

// fakeFirecracker serves as Firecracker; cfg and spec are loaded from
// fake.json when nil.
func fakeFirecracker(args []string, jailed bool, cfg *fakeConfig, spec *apiSpec) int {
	fs := flag.NewFlagSet("firecracker", flag.ContinueOnError)
	apiSock := fs.String("api-sock", "/run/firecracker.socket", "")
	version := fs.Bool("version", false, "")
	fs.String("id", "", "")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *version {
		fmt.Println("Firecracker v1.17.0-fake")
		return 0
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "fake firecracker: unexpected arguments %q\n", fs.Args())
		return 2
	}
	if spec == nil {
		c, s, err := loadFake()
		if err != nil {
			fmt.Fprintln(os.Stderr, "fake firecracker:", err)
			return 1
		}
		cfg, spec = &c, s
	}
	f := &fake{cfg: *cfg, spec: spec, jailed: jailed, state: "Not started", drives: map[string]drive{}}
	ln, err := net.Listen("unix", f.path(*apiSock))
	if err != nil {
		fmt.Fprintln(os.Stderr, "fake firecracker: API socket:", err)
		return 1
	}
	fmt.Printf("fake firecracker: serving the API on %s\n", *apiSock)
	err = http.Serve(ln, f)
	fmt.Fprintln(os.Stderr, "fake firecracker:", err)
	return 1
}

// path is where the process finds a path the API names: relative to its
// working directory, or, jailed, inside the jail (its working directory).
func (f *fake) path(p string) string {
	if f.jailed && filepath.IsAbs(p) {
		return "." + p
	}
	return p
}

// open opens a file the API names, as Firecracker would: jailed, a
// symlink cannot lead out of the chroot, so it is refused.
func (f *fake) open(p string, flags int) (*os.File, error) {
	p = f.path(p)
	if f.jailed {
		if st, err := os.Lstat(p); err == nil && st.Mode()&os.ModeSymlink != 0 {
			return nil, fmt.Errorf("%s is a symlink, which does not resolve inside the jail", p)
		}
	}
	return os.OpenFile(p, flags, 0)
}

func (f *fake) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	route := r.Method + " " + r.URL.Path
	// Like Firecracker's own log, the requests go to stdout: the
	// machine's console log, which the tests read.
	fmt.Printf("fake-api: %s %s\n", route, bytes.TrimSpace(body))
	err := f.spec.validate(r.Method, r.URL.Path, body)
	if err != nil {
		err = fault("fake firecracker: the request does not match the API description: %v", err)
	} else if r.Header.Get("Content-Type") != "application/json" && len(body) > 0 {
		err = fault("fake firecracker: Content-Type %q", r.Header.Get("Content-Type"))
	} else if msg, ok := f.cfg.Faults[route]; ok {
		err = fault("%s", msg)
	} else if route == f.cfg.Crash {
		fmt.Fprintf(os.Stderr, "fake firecracker: crashing on %s\n", route)
		os.Exit(1)
	} else {
		f.mu.Lock()
		err = f.handle(route, r.URL.Path, body)
		f.mu.Unlock()
	}
	if err == nil {
		w.WriteHeader(http.StatusNoContent)
		return
	}
	var fe *faultError
	if !errors.As(err, &fe) {
		fe = &faultError{status: http.StatusInternalServerError, msg: err.Error()}
	}
	fmt.Printf("fake-api: %s -> %d %s\n", route, fe.status, fe.msg)
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(fe.status)
	json.NewEncoder(w).Encode(map[string]string{"fault_message": fe.msg})
	if fe.exit {
		go func() { time.Sleep(50 * time.Millisecond); os.Exit(1) }()
	}
}

func (f *fake) handle(route, path string, body []byte) error {
	preBoot := func() error {
		if f.state != "Not started" {
			return fault("The requested operation is not supported after starting the microVM.")
		}
		f.touched = true
		return nil
	}
	switch {
	case route == "PUT /boot-source":
		if err := preBoot(); err != nil {
			return err
		}
		var b bootSource
		json.Unmarshal(body, &b)
		for _, p := range []string{b.KernelImagePath, b.InitrdPath} {
			if p == "" {
				continue
			}
			file, err := f.open(p, os.O_RDONLY)
			if err != nil {
				return fault("Invalid kernel or initrd path: %v", err)
			}
			file.Close()
		}
		f.boot = &b
	case route == "PUT /machine-config":
		return preBoot()
	case strings.HasPrefix(route, "PUT /drives/"):
		if err := preBoot(); err != nil {
			return err
		}
		var d drive
		json.Unmarshal(body, &d)
		if id := strings.TrimPrefix(path, "/drives/"); id != d.DriveID {
			return fault("The id from the path [%s] does not match the id from the body [%s]!", id, d.DriveID)
		}
		if err := f.openDrive(d); err != nil {
			return err
		}
		if _, ok := f.drives[d.DriveID]; !ok {
			f.order = append(f.order, d.DriveID)
		}
		f.drives[d.DriveID] = d
	case route == "PUT /vsock":
		if err := preBoot(); err != nil {
			return err
		}
		var v vsockDevice
		json.Unmarshal(body, &v)
		if err := f.bindVsock(v); err != nil {
			return err
		}
	case route == "PUT /actions":
		var a instanceAction
		json.Unmarshal(body, &a)
		if a.ActionType != "InstanceStart" {
			return nil
		}
		if f.state != "Not started" {
			return fault("The microVM is already running.")
		}
		if f.boot == nil {
			return fault("Cannot start microvm without kernel configuration.")
		}
		f.state = "Running"
		f.bootID = randomID()
		if strings.Contains(f.boot.BootArgs, "console=ttyS0") {
			fmt.Printf("fake guest: booting %s with command line: %s\n", f.bootID, f.boot.BootArgs)
		}
		if f.cfg.FloodBytes > 0 {
			go floodConsole(f.cfg.FloodBytes, time.Duration(f.cfg.FloodMS)*time.Millisecond)
		}
		if !f.cfg.NeverListen {
			time.AfterFunc(time.Duration(f.cfg.ListenAfterMS)*time.Millisecond, func() {
				f.mu.Lock()
				f.listening = true
				f.mu.Unlock()
			})
		}
	case route == "PATCH /vm":
		var s vmState
		json.Unmarshal(body, &s)
		if f.state == "Not started" {
			return fault("The microVM is not running.")
		}
		f.state = map[string]string{"Paused": "Paused", "Resumed": "Running"}[s.State]
	case route == "PUT /snapshot/create":
		if f.state != "Paused" {
			return fault("Cannot create a snapshot of a microVM that is not paused.")
		}
		var c snapshotCreate
		json.Unmarshal(body, &c)
		return f.writeSnapshot(c)
	case route == "PUT /snapshot/load":
		if f.touched || f.state != "Not started" {
			return fault("Loading a microVM snapshot not allowed after configuring boot-specific resources.")
		}
		var l snapshotLoad
		json.Unmarshal(body, &l)
		if err := f.loadSnapshot(l); err != nil {
			fe := fault("Load snapshot error: %v", err)
			fe.exit = true
			return fe
		}
	default:
		return fault("the fake does not implement %s", route)
	}
	return nil
}

func (f *fake) openDrive(d drive) error {
	flags := os.O_RDWR
	if d.IsReadOnly {
		flags = os.O_RDONLY
	}
	file, err := f.open(d.PathOnHost, flags)
	if err != nil {
		return fault("Unable to create the block device: BackingFile(%v)", err)
	}
	file.Close()
	return nil
}

func (f *fake) bindVsock(v vsockDevice) error {
	ln, err := net.Listen("unix", f.path(v.UDSPath))
	if err != nil {
		return fault("Cannot create vsock device: %v", err)
	}
	f.vsock, f.vsockLn = &v, ln
	go f.serveVsock(ln)
	return nil
}

// fakeSnapshot is the fake's vmstate file: what a real one records of
// the devices, paths included as they were given.
type fakeSnapshot struct {
	BootID   string       `json:"boot_id"`
	BootArgs string       `json:"boot_args"`
	Drives   []drive      `json:"drives"`
	Vsock    *vsockDevice `json:"vsock"`
}

func (f *fake) writeSnapshot(c snapshotCreate) error {
	snap := fakeSnapshot{BootID: f.bootID, BootArgs: f.boot.BootArgs, Vsock: f.vsock}
	for _, id := range f.order {
		snap.Drives = append(snap.Drives, f.drives[id])
	}
	data, _ := json.Marshal(snap)
	if err := os.WriteFile(f.path(c.SnapshotPath), data, 0o600); err != nil {
		return fault("Cannot save the microVM state: %v", err)
	}
	if err := os.WriteFile(f.path(c.MemFilePath), []byte("fake guest memory of "+f.bootID+"\n"), 0o600); err != nil {
		return fault("Cannot save the memory: %v", err)
	}
	return nil
}

func (f *fake) loadSnapshot(l snapshotLoad) error {
	if l.MemBackend.BackendType != "File" {
		return fmt.Errorf("the fake loads File backends only")
	}
	file, err := f.open(l.SnapshotPath, os.O_RDONLY)
	if err != nil {
		return err
	}
	var snap fakeSnapshot
	err = json.NewDecoder(file).Decode(&snap)
	file.Close()
	if err != nil {
		return err
	}
	mem, err := f.open(l.MemBackend.BackendPath, os.O_RDONLY)
	if err != nil {
		return err
	}
	memData, _ := io.ReadAll(mem)
	mem.Close()
	if !bytes.Contains(memData, []byte(snap.BootID)) {
		return fmt.Errorf("the memory file is not the one of the microVM state")
	}
	// The saved paths, resolved from this process's directory.
	for _, d := range snap.Drives {
		if err := f.openDrive(d); err != nil {
			return err
		}
		f.drives[d.DriveID] = d
		f.order = append(f.order, d.DriveID)
	}
	if snap.Vsock != nil {
		if err := f.bindVsock(*snap.Vsock); err != nil {
			return err
		}
	}
	f.boot = &bootSource{BootArgs: snap.BootArgs}
	f.bootID, f.restored = snap.BootID, true
	f.state = "Paused"
	if l.ResumeVM {
		f.state = "Running"
		// A listening socket survives the snapshot.
		f.listening = true
	}
	return nil
}

// floodConsole writes n bytes of numbered lines to stdout, as a guest
// printing to its serial console as fast as it can would, at an even pace
// over the duration over: "fake guest: flood begins", the lines, "fake
// guest: flood ends". A stdout that is not drained blocks it, and with it
// the API's handlers, which log to stdout too.
func floodConsole(n int, over time.Duration) {
	w := bufio.NewWriterSize(os.Stdout, 64<<10)
	fmt.Fprintln(w, "fake guest: flood begins")
	start, total := time.Now(), n
	var line []byte
	for i := 0; n > 0; i++ {
		line = fmt.Appendf(line[:0], "fake guest: flood line %d, printk as fast as the guest can\n", i)
		line = line[:min(len(line), n)]
		w.Write(line)
		n -= len(line)
		if w.Available() < 256 {
			w.Flush()
			time.Sleep(time.Until(start.Add(time.Duration(float64(over) * float64(total-n) / float64(total)))))
		}
	}
	fmt.Fprintln(w, "fake guest: flood ends")
	w.Flush()
}

var connectLine = regexp.MustCompile(`^CONNECT ([0-9]+)$`)

// serveVsock plays Firecracker's hybrid vsock and the guest: CONNECT to
// the control port, once the guest listens, answers OK followed at once
// by the guest's hello (so a client that reads past the OK line loses
// it), then echoes.
func (f *fake) serveVsock(ln net.Listener) {
	for {
		conn, err := ln.Accept()
		if err != nil {
			return
		}
		go func() {
			defer conn.Close()
			br := bufio.NewReader(conn)
			line, err := br.ReadString('\n')
			if err != nil {
				return
			}
			m := connectLine.FindStringSubmatch(strings.TrimSuffix(line, "\n"))
			f.mu.Lock()
			ok := m != nil && m[1] == strconv.Itoa(ControlPort) && f.listening && f.state == "Running"
			hello := fmt.Sprintf("hello boot=%s restored=%t disk=%s\n", f.bootID, f.restored, f.rootDisk())
			f.mu.Unlock()
			if !ok {
				return // nothing listens: Firecracker closes the connection
			}
			if _, err := io.WriteString(conn, "OK 1073741824\n"+hello); err != nil {
				return
			}
			io.Copy(conn, br)
		}()
	}
}

// rootDisk is the start of the root drive's content, as the guest reads it.
func (f *fake) rootDisk() string {
	if len(f.order) == 0 {
		return "none"
	}
	file, err := f.open(f.drives[f.order[0]].PathOnHost, os.O_RDONLY)
	if err != nil {
		return "unreadable"
	}
	defer file.Close()
	b := make([]byte, 32)
	n, _ := file.Read(b)
	return strings.TrimSpace(string(bytes.TrimRight(b[:n], "\x00")))
}

func randomID() string {
	var b [6]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

var jailIDPattern = regexp.MustCompile(`^[A-Za-z0-9-]{1,64}$`)

// fakeJailer does what the jailer does before it execs Firecracker, as
// far as a process that cannot pivot_root into a jail without the binary
// in it can: it checks its arguments as the jailer does, makes and owns
// the jail, enters it as its working directory, drops to uid:gid, and
// serves as Firecracker there, resolving absolute paths inside the jail.
func fakeJailer(args []string) int {
	fs := flag.NewFlagSet("jailer", flag.ContinueOnError)
	id := fs.String("id", "", "")
	execFile := fs.String("exec-file", "", "")
	uid := fs.Int("uid", -1, "")
	gid := fs.Int("gid", -1, "")
	base := fs.String("chroot-base-dir", "/srv/jailer", "")
	version := fs.Bool("version", false, "")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *version {
		fmt.Println("Jailer v1.17.0-fake")
		return 0
	}
	fmt.Printf("fake jailer: %s\n", strings.Join(args, " "))
	fail := func(format string, a ...any) int {
		fmt.Fprintf(os.Stderr, "fake jailer: "+format+"\n", a...)
		return 1
	}
	if !jailIDPattern.MatchString(*id) {
		return fail("invalid --id %q", *id)
	}
	if *uid < 0 || *gid < 0 {
		return fail("--uid and --gid are required")
	}
	exe, err := filepath.EvalSymlinks(*execFile)
	if err != nil {
		return fail("--exec-file: %v", err)
	}
	if st, err := os.Stat(exe); err != nil || !st.Mode().IsRegular() {
		return fail("--exec-file %s is not a file", exe)
	}
	canonBase, err := filepath.EvalSymlinks(*base)
	if err != nil {
		return fail("--chroot-base-dir: %v", err)
	}
	root := filepath.Join(canonBase, filepath.Base(exe), *id, "root")
	if err := os.MkdirAll(root, 0o755); err != nil {
		return fail("%v", err)
	}
	if err := os.Chown(root, *uid, *gid); err != nil {
		return fail("%v", err)
	}
	// Read before dropping privileges: the test's directories are not
	// the jail user's.
	cfg, spec, err := loadFake()
	if err != nil {
		return fail("%v", err)
	}
	if err := os.Chdir(root); err != nil {
		return fail("%v", err)
	}
	if err := syscall.Setgroups(nil); err != nil {
		return fail("setgroups: %v", err)
	}
	if err := syscall.Setgid(*gid); err != nil {
		return fail("setgid: %v", err)
	}
	if err := syscall.Setuid(*uid); err != nil {
		return fail("setuid: %v", err)
	}
	return fakeFirecracker(append([]string{"--id", *id}, fs.Args()...), true, &cfg, spec)
}
