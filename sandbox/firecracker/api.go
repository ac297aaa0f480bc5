package firecracker

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
)

// The API's request bodies (definitions in testdata/firecracker.yaml).
// Optional fields the VMM never sets are left out, so older Firecracker
// releases, which refuse unknown fields, accept the requests too.
type (
	bootSource struct {
		KernelImagePath string `json:"kernel_image_path"`
		InitrdPath      string `json:"initrd_path,omitempty"`
		BootArgs        string `json:"boot_args,omitempty"`
	}
	drive struct {
		DriveID      string `json:"drive_id"`
		PathOnHost   string `json:"path_on_host"`
		IsRootDevice bool   `json:"is_root_device"`
		IsReadOnly   bool   `json:"is_read_only"`
	}
	machineConfig struct {
		VCPUCount  int `json:"vcpu_count"`
		MemSizeMiB int `json:"mem_size_mib"`
	}
	vsockDevice struct {
		GuestCID int    `json:"guest_cid"`
		UDSPath  string `json:"uds_path"`
	}
	instanceAction struct {
		ActionType string `json:"action_type"`
	}
	vmState struct {
		State string `json:"state"`
	}
	snapshotCreate struct {
		SnapshotType string `json:"snapshot_type"`
		SnapshotPath string `json:"snapshot_path"`
		MemFilePath  string `json:"mem_file_path"`
	}
	memoryBackend struct {
		BackendType string `json:"backend_type"`
		BackendPath string `json:"backend_path"`
	}
	snapshotLoad struct {
		SnapshotPath string        `json:"snapshot_path"`
		MemBackend   memoryBackend `json:"mem_backend"`
		ResumeVM     bool          `json:"resume_vm"`
	}
)

// APIError is a request Firecracker refused: its status and the
// fault_message of its Error body.
type APIError struct {
	Method, Path string
	Status       int
	FaultMessage string
}

func (e *APIError) Error() string {
	msg := e.FaultMessage
	if msg == "" {
		msg = "(no fault_message in the response)"
	}
	return fmt.Sprintf("firecracker API %s %s: %d %s: %s", e.Method, e.Path, e.Status, http.StatusText(e.Status), msg)
}

// apiClient talks HTTP to Firecracker's API socket.
type apiClient struct {
	sock string
	hc   *http.Client
}

func newAPIClient(sock string) *apiClient {
	tr := &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sock)
		},
		// One client, one Firecracker, requests in sequence: one
		// connection is all it needs.
		MaxIdleConns:       1,
		DisableCompression: true,
	}
	return &apiClient{sock: sock, hc: &http.Client{Transport: tr}}
}

// call sends body as JSON and returns nil on a 2xx answer (Firecracker
// answers 204 No Content), an *APIError otherwise.
func (c *apiClient) call(ctx context.Context, method, path string, body any) error {
	data, err := json.Marshal(body)
	if err != nil {
		return fmt.Errorf("firecracker API %s %s: encoding the body: %w", method, path, err)
	}
	// The host part is ignored (the transport dials the socket), but
	// Firecracker's HTTP server wants a well-formed request line and Host.
	req, err := http.NewRequestWithContext(ctx, method, "http://localhost"+path, bytes.NewReader(data))
	if err != nil {
		return fmt.Errorf("firecracker API %s %s: %w", method, path, err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json")
	resp, err := c.hc.Do(req)
	if err != nil {
		return fmt.Errorf("firecracker API %s %s on %s: %w", method, path, c.sock, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode/100 == 2 {
		return nil
	}
	apiErr := &APIError{Method: method, Path: path, Status: resp.StatusCode}
	var fault struct {
		FaultMessage string `json:"fault_message"`
	}
	if json.Unmarshal(raw, &fault) == nil && fault.FaultMessage != "" {
		apiErr.FaultMessage = fault.FaultMessage
	} else {
		apiErr.FaultMessage = strings.TrimSpace(string(raw))
	}
	return apiErr
}

func (c *apiClient) close() { c.hc.CloseIdleConnections() }
