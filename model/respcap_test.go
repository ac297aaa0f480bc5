package model_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"evals.si/model"
	"evals.si/spec"
	"evals.si/trajectory"
)

// A body longer than the cap fails to read with the cap's error, whether it
// streams (no Content-Length) or says its length up front; one within the
// cap reads unchanged.
func TestCapResponses(t *testing.T) {
	const limit = 64 << 10
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n, _ := strconv.Atoi(r.URL.Query().Get("n"))
		if r.URL.Query().Get("length") != "" {
			w.Header().Set("Content-Length", strconv.Itoa(n))
		}
		chunk := bytes.Repeat([]byte("x"), 4<<10)
		for n > 0 {
			c := chunk[:min(n, len(chunk))]
			if _, err := w.Write(c); err != nil {
				return // the client stopped reading
			}
			w.(http.Flusher).Flush()
			n -= len(c)
		}
	}))
	defer srv.Close()
	client := &http.Client{Transport: model.CapResponses(nil, limit)}
	for _, tc := range []struct {
		name     string
		n        int
		length   bool
		over     bool
		readUpTo int // at most this much is read before the error
	}{
		{"empty", 0, false, false, 0},
		{"under the cap, streamed", limit - 1, false, false, limit - 1},
		{"exactly the cap, streamed", limit, false, false, limit},
		{"exactly the cap, with length", limit, true, false, limit},
		{"one byte over, streamed", limit + 1, false, true, limit},
		{"far over, streamed", 64 << 20, false, true, limit},
		{"over, with length", 2 * limit, true, true, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			url := srv.URL + "/?n=" + strconv.Itoa(tc.n)
			if tc.length {
				url += "&length=1"
			}
			resp, err := client.Get(url)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			body, err := io.ReadAll(resp.Body)
			// An overflowing body tells the anthropic SDK not to retry.
			if retry := resp.Header.Get("X-Should-Retry"); (retry == "false") != tc.over {
				t.Errorf("X-Should-Retry %q after reading %d bytes", retry, len(body))
			}
			if !tc.over {
				if err != nil || !bytes.Equal(body, bytes.Repeat([]byte("x"), tc.n)) {
					t.Fatalf("read %d bytes, err %v; want the %d-byte body unchanged", len(body), err, tc.n)
				}
				return
			}
			var tooLarge *model.ResponseTooLargeError
			if !errors.As(err, &tooLarge) || len(body) > tc.readUpTo {
				t.Fatalf("read %d bytes, err %v; want at most %d and the cap's error", len(body), err, tc.readUpTo)
			}
			want := "model response from " + srv.Listener.Addr().String() + " exceeded the 64 KiB cap (caps.model_response_mb)"
			if err.Error() != want {
				t.Errorf("err %q, want %q", err, want)
			}
		})
	}
}

// Every connector, streamed or not, fails a call whose response is over the
// cap, once (no retries: the answer would be as large again), and answers
// one under it unchanged.
func TestConnectorResponseCap(t *testing.T) {
	big := strings.Repeat("long answer ", 20<<10) // 240 KiB
	script := "rules:\n  - contains: big\n    replies: [{content: " + big + "}]\ndefault:\n  - content: a short answer\n"
	for _, f := range flavours {
		t.Run(f.String(), func(t *testing.T) {
			srv, base := startServer(t, script)
			retries := 2 // allowed, and not used: a retry would be as large again
			ref := spec.ModelRef{Connector: f.connector, Model: "test-model", BaseURL: f.baseURL(base), MaxRetries: &retries}
			c, err := model.New(ref, model.Options{
				Getenv:     env(map[string]string{"OPENAI_API_KEY": "sk-test", "ANTHROPIC_API_KEY": "sk-ant-test"}),
				HTTPClient: &http.Client{Transport: model.CapResponses(nil, 64<<10)},
				Stream:     f.stream,
			})
			if err != nil {
				t.Fatal(err)
			}
			ask := func(q string) (model.Response, error) {
				return c.Chat(context.Background(), model.Request{Messages: []trajectory.Message{{Role: trajectory.RoleUser, Content: q}}})
			}
			resp, err := ask("a small question")
			if err != nil || resp.Message.Content != "a short answer" {
				t.Fatalf("under the cap: %q, %v", resp.Message.Content, err)
			}
			_, err = ask("a big question")
			host := strings.TrimPrefix(base, "http://")
			var tooLarge *model.ResponseTooLargeError
			if !errors.As(err, &tooLarge) || !strings.Contains(err.Error(), "model response from "+host+" exceeded the 64 KiB cap (caps.model_response_mb)") {
				t.Fatalf("over the cap: err %v", err)
			}
			t.Logf("over the cap: %v", err)
			if n := len(srv.Requests()); n != 2 {
				t.Errorf("the server saw %d requests, want 2 (no retry of an oversized answer)", n)
			}
		})
	}
}
