package execproto

// A microVM guest (evalsi-guest, the guest's init) serves this protocol over
// its control port: a vsock connection (Firecracker) or a virtio-serial port
// (QEMU). It speaks the frames above and these. The host sends nothing
// before the guest's FrameReady. A guest is set up once (FrameSetup) after
// it boots, or, from a warm pool, when it is taken; a guest restored from
// a snapshot is told so (FrameRestore) before anything else.
//
// There is no network device in a guest. When the policy lets the sandbox
// reach the egress proxy, the guest listens on 127.0.0.1:ProxyPort and
// carries each connection to the host over the control port (FrameDial,
// FrameData, FrameAck, FrameHangup), where the host connects it to the
// proxy; deny means no listener and no path.
const (
	// FrameSetup (host → guest): SetupMsg. Answered by FrameFileResult
	// (Err set when it failed).
	FrameSetup = 'S'
	// FrameRestore (host → guest): RestoreMsg. Answered by
	// FrameFileResult.
	FrameRestore = 'R'
	// FrameSync (host → guest, no payload): flush every filesystem to
	// its disk (sync(2)), before the host stops the machine to keep its
	// disk as a snapshot layer. Answered by FrameFileResult.
	FrameSync = 'Y'

	// FrameDial (guest → host): a connection to the proxy was opened
	// inside; id is the guest's connection id (GuestIDBit set), payload
	// empty. The host answers with data, or FrameHangup and FrameReset
	// when it cannot reach the proxy.
	FrameDial = 'c'
	// FrameData (both ways): bytes of connection id, at most
	// TunnelChunk per frame.
	FrameData = 'b'
	// FrameAck (both ways): AckMsg; the receiver has written N more
	// bytes of connection id to its socket, so the sender may send N
	// more. A sender never has more than TunnelWindow bytes unacked.
	FrameAck = 'a'
	// FrameHangup (both ways): the sender will send no more data on
	// connection id (a half close); the connection ends when both sides
	// have hung up.
	FrameHangup = 'h'
	// FrameReset (both ways): connection id is over at once, data in
	// flight is dropped.
	FrameReset = 'z'
)

// GuestIDBit marks ids the guest chooses (its tunnel connections), so they
// never meet the host's call ids.
const GuestIDBit = 1 << 31

// Tunnel flow control.
const (
	TunnelChunk  = 32 << 10
	TunnelWindow = 256 << 10
)

// SetupMsg is the sandbox's configuration inside the guest. The first one
// mounts and creates; later ones (a policy change) may change only
// ProxyPort and the limits, and fail when they change anything else.
type SetupMsg struct {
	// Workdir is created (with missing parents) and stays writable under
	// ReadOnlyRoot, as /tmp does.
	Workdir      string
	ReadOnlyRoot bool
	Hostname     string
	// Etc are written over the root's files of the same path (the
	// sandbox's /etc/hosts, /etc/hostname, /etc/resolv.conf), also under
	// ReadOnlyRoot.
	Etc []EtcFile
	// ProxyPort: 0, no egress at all; else the guest listens on
	// 127.0.0.1:ProxyPort and tunnels each connection to the host.
	ProxyPort int
	// Per command (its own cgroup in the guest): memory.max, pids.max
	// and cpu.max, 0 for none; FileSizeMB is RLIMIT_FSIZE.
	MemoryMB   int
	PidsMax    int
	CPUMillis  int // cpu.max quota per 100 ms period, in thousandths of a CPU
	FileSizeMB int
	// DiskMB caps what the sandbox may write to its root disk in all
	// (the rest of the disk's free space is reserved); 0: the disk's free
	// space.
	DiskMB int
}

// EtcFile is one file SetupMsg writes.
type EtcFile struct {
	Path string
	Data []byte
}

// RestoreMsg follows a restore from a snapshot: the guest sets its clock
// and mixes Seed into its entropy pool (and reseeds), so no two restored
// copies share a clock or a random stream.
type RestoreMsg struct {
	UnixNano int64
	Seed     []byte
}

// AckMsg acknowledges tunnel bytes (FrameAck).
type AckMsg struct {
	N uint64
}

func (m SetupMsg) Marshal() []byte {
	var e enc
	e.string(m.Workdir)
	e.bool(m.ReadOnlyRoot)
	e.string(m.Hostname)
	e.uint(uint64(len(m.Etc)))
	for _, f := range m.Etc {
		e.string(f.Path)
		e.bytes(f.Data)
	}
	e.uint(uint64(m.ProxyPort))
	e.uint(uint64(m.MemoryMB))
	e.uint(uint64(m.PidsMax))
	e.uint(uint64(m.CPUMillis))
	e.uint(uint64(m.FileSizeMB))
	e.uint(uint64(m.DiskMB))
	return e.b
}

func (m *SetupMsg) Unmarshal(b []byte) error {
	d := dec{b: b}
	m.Workdir, m.ReadOnlyRoot, m.Hostname = d.string(), d.bool(), d.string()
	n := d.uint()
	if n > uint64(len(d.b)) {
		return errMalformed
	}
	m.Etc = nil
	for range n {
		m.Etc = append(m.Etc, EtcFile{Path: d.string(), Data: d.bytes()})
	}
	m.ProxyPort, m.MemoryMB, m.PidsMax = int(d.uint()), int(d.uint()), int(d.uint())
	m.CPUMillis, m.FileSizeMB, m.DiskMB = int(d.uint()), int(d.uint()), int(d.uint())
	return d.end()
}

func (m RestoreMsg) Marshal() []byte {
	var e enc
	e.uint(uint64(m.UnixNano))
	e.bytes(m.Seed)
	return e.b
}

func (m *RestoreMsg) Unmarshal(b []byte) error {
	d := dec{b: b}
	m.UnixNano, m.Seed = int64(d.uint()), d.bytes()
	return d.end()
}

func (m AckMsg) Marshal() []byte {
	var e enc
	e.uint(m.N)
	return e.b
}

func (m *AckMsg) Unmarshal(b []byte) error {
	d := dec{b: b}
	m.N = d.uint()
	return d.end()
}
