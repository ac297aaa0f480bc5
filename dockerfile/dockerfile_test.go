package dockerfile

import (
	"encoding/base64"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"evals.si/spec"
)

func writeContext(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, data := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		mode := os.FileMode(0o644)
		if strings.HasSuffix(name, ".sh") {
			mode = 0o755
		}
		if err := os.WriteFile(p, []byte(data), mode); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestTranslate(t *testing.T) {
	ctx := writeContext(t, map[string]string{
		"workspace/a.py":      "print('a')\n",
		"workspace/sub/b.txt": "b",
		"run.sh":              "#!/bin/sh\necho run\n",
		"blob.bin":            "\x00\x01\xff",
	})
	df := `# syntax=docker/dockerfile:1
ARG BASE=ubuntu
ARG TAG=24.04
FROM --platform=linux/amd64 ${BASE}:${TAG}
ARG TAG
ARG VERSION=1.2
ENV APP_HOME=/app \
    PATH="/opt/bin:$PATH"
RUN apt-get update && \
    apt-get install -y tmux
WORKDIR $APP_HOME
COPY workspace/ ./
COPY run.sh blob.bin /usr/local/bin/
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
RUN echo "$VERSION $TAG" > v.txt
ENV LATE=1
WORKDIR src
RUN ["python3", "-c", "print(1)"]
CMD ["sleep", "infinity"]
`
	tr, err := Translate([]byte(df), ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if tr.Image != "ubuntu:24.04" || tr.Platform != "linux/amd64" {
		t.Errorf("image %q platform %q", tr.Image, tr.Platform)
	}
	if tr.Workdir != "/app/src" {
		t.Errorf("workdir %q, want /app/src", tr.Workdir)
	}
	wantEnv := map[string]string{"APP_HOME": "/app", "PATH": "/opt/bin:" + DefaultPath, "LATE": "1"}
	if !reflect.DeepEqual(tr.Env, wantEnv) {
		t.Errorf("env %v, want %v", tr.Env, wantEnv)
	}
	wantFiles := map[string]string{
		"/app/a.py":                           "print('a')\n",
		"/app/sub/b.txt":                      "b",
		"/usr/local/bin/run.sh":               "#!/bin/sh\necho run\n",
		"/usr/local/bin/blob.bin" + B64Suffix: base64.StdEncoding.EncodeToString([]byte("\x00\x01\xff")),
	}
	if !reflect.DeepEqual(tr.Files, wantFiles) {
		t.Errorf("files %v, want %v", tr.Files, wantFiles)
	}
	want := []string{
		"base64 -d /usr/local/bin/blob.bin.evalsi-b64 > /usr/local/bin/blob.bin && rm -f /usr/local/bin/blob.bin.evalsi-b64 && chmod 755 /usr/local/bin/run.sh",
		`export TAG=24.04; export VERSION=1.2; export APP_HOME=/app; export PATH=/opt/bin:` + DefaultPath + `; unset LATE; cd / && exec /bin/sh -c 'apt-get update &&     apt-get install -y tmux'`,
		"mkdir -p /app",
		`export TAG=24.04; export VERSION=1.2; export APP_HOME=/app; export PATH=/opt/bin:` + DefaultPath + `; unset LATE; cd /app && exec /bin/bash -o pipefail -c 'echo "$VERSION $TAG" > v.txt'`,
		"mkdir -p /app/src",
		`export TAG=24.04; export VERSION=1.2; export APP_HOME=/app; export PATH=/opt/bin:` + DefaultPath + `; export LATE=1; cd /app/src && exec python3 -c 'print(1)'`,
	}
	if !reflect.DeepEqual(runs(tr.Setup), want) {
		t.Errorf("setup:\n%s\nwant:\n%s", strings.Join(runs(tr.Setup), "\n"), strings.Join(want, "\n"))
	}
}

func TestTranslateBuildArgAndSingleFileDest(t *testing.T) {
	ctx := writeContext(t, map[string]string{"conf.ini": "x=1\n"})
	tr, err := Translate([]byte("ARG IMG=debian:12\nFROM $IMG\nCOPY conf.ini /etc/app.ini\n"), ctx, map[string]string{"IMG": "python:3.13"})
	if err != nil {
		t.Fatal(err)
	}
	if tr.Image != "python:3.13" {
		t.Errorf("image %q", tr.Image)
	}
	if tr.Files["/etc/app.ini"] != "x=1\n" || len(tr.Files) != 1 {
		t.Errorf("files %v", tr.Files)
	}
	if tr.Workdir != "" || len(tr.Setup) != 0 {
		t.Errorf("workdir %q setup %q", tr.Workdir, tr.Setup)
	}
}

func TestTranslateRefusals(t *testing.T) {
	ctx := writeContext(t, map[string]string{"f": "x"})
	cases := map[string]string{
		"multi-stage":    "FROM golang AS build\nRUN go build\nFROM debian\nCOPY --from=build /x /x\n",
		"copy --from":    "FROM debian\nCOPY --from=alpine /bin/sh /sh\n",
		"remote ADD":     "FROM debian\nADD https://example.com/x.tar.gz /opt/\n",
		"RUN --mount":    "FROM debian\nRUN --mount=type=cache,target=/root/.cache pip install x\n",
		"heredoc":        "FROM debian\nRUN <<EOF\necho hi\nEOF\n",
		"copy --parents": "FROM debian\nCOPY --parents f /x/\n",
		"chmod symbolic": "FROM debian\nCOPY --chmod=u+x f /f\n",
		"scratch":        "FROM scratch\nCOPY f /f\n",
	}
	for name, df := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := Translate([]byte(df), ctx, nil)
			var r *RefusalError
			if !errors.As(err, &r) {
				t.Fatalf("got %v, want a refusal", err)
			}
			if r.Reason == "" {
				t.Error("refusal without a reason")
			}
		})
	}
}

func TestTranslateErrors(t *testing.T) {
	ctx := writeContext(t, nil)
	for name, df := range map[string]string{
		"no FROM":      "RUN echo\n",
		"missing file": "FROM debian\nCOPY nothere /x\n",
	} {
		t.Run(name, func(t *testing.T) {
			_, err := Translate([]byte(df), ctx, nil)
			var r *RefusalError
			if err == nil || errors.As(err, &r) {
				t.Fatalf("got %v, want a plain error", err)
			}
		})
	}
}

func TestQuote(t *testing.T) {
	for in, want := range map[string]string{"/a/b": "/a/b", "": "''", "a b": "'a b'", "it's": `'it'\''s'`, "$X": "'$X'"} {
		if got := Quote(in); got != want {
			t.Errorf("Quote(%q) = %s, want %s", in, got, want)
		}
	}
}

func runs(steps []spec.SetupStep) []string {
	out := make([]string, len(steps))
	for i, s := range steps {
		out[i] = s.Run
	}
	return out
}
