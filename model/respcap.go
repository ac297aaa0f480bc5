package model

import (
	"fmt"
	"io"
	"net/http"
)

// ResponseTooLargeError is the error reading a model response body past its
// cap: an infrastructure error of the call (the model's answer is not
// there to score), which a retry would only repeat.
type ResponseTooLargeError struct {
	Host  string
	Limit int64
}

func (e *ResponseTooLargeError) Error() string {
	return fmt.Sprintf("model response from %s exceeded the %s cap (caps.model_response_mb)", e.Host, sizeString(e.Limit))
}

// sizeString writes n bytes in the largest binary unit that divides it.
func sizeString(n int64) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d bytes", n)
}

// CapResponses wraps next (nil: http.DefaultTransport) so that no response
// body yields more than limit bytes: the SDKs read whole bodies (and
// accumulate whole SSE streams) into memory, so without a cap one
// misbehaving endpoint could grow the engine without bound. Reading past
// the cap fails with a *ResponseTooLargeError, from the first read when the
// Content-Length already says so.
//
// An oversized answer is not retried: the same request would most likely
// be answered as largely again. The openai SDK reads bodies after its retry
// decision; the anthropic SDK retries a body it could not read unless the
// response says "X-Should-Retry: false", which the body sets on its
// response when it overflows.
func CapResponses(next http.RoundTripper, limit int64) http.RoundTripper {
	if next == nil {
		next = http.DefaultTransport
	}
	return cappedTransport{next: next, limit: limit}
}

type cappedTransport struct {
	next  http.RoundTripper
	limit int64
}

func (t cappedTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.next.RoundTrip(req)
	if err != nil || resp.Body == nil || resp.Body == http.NoBody {
		return resp, err
	}
	b := &cappedBody{rc: resp.Body, left: t.limit, header: resp.Header,
		err: &ResponseTooLargeError{Host: req.URL.Host, Limit: t.limit}}
	if resp.ContentLength > t.limit {
		b.overflow()
	}
	resp.Body = b
	return resp, nil
}

// cappedBody reads at most left more bytes of rc; one byte more is an error.
type cappedBody struct {
	rc     io.ReadCloser
	left   int64
	over   bool
	err    error
	header http.Header // the response's, told not to retry on overflow
}

func (b *cappedBody) overflow() {
	b.left, b.over = 0, true
	if b.header != nil {
		b.header.Set("X-Should-Retry", "false")
	}
}

func (b *cappedBody) Read(p []byte) (int, error) {
	if b.over {
		return 0, b.err
	}
	if int64(len(p)) > b.left+1 {
		// Ask for one byte past the cap at most: enough to tell a body of
		// exactly the cap from a longer one.
		p = p[:b.left+1]
	}
	n, err := b.rc.Read(p)
	if int64(n) > b.left {
		n = int(b.left)
		b.overflow()
		return n, b.err
	}
	b.left -= int64(n)
	return n, err
}

func (b *cappedBody) Close() error { return b.rc.Close() }
