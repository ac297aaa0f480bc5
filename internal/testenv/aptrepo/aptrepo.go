// Package aptrepo gives tests a small Debian package repository served
// from a test host of their own (package nethost), for task Dockerfiles
// that run `apt-get update && apt-get install`: no test reaches an outside
// address. The repository is scripts/build-apt-repo.sh's (a few real .debs
// indexed with dpkg-scanpackages and apt-ftparchive, cached). Test support
// only.
package aptrepo

import (
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"evals.si/internal/testenv"
	"evals.si/internal/testenv/nethost"
)

// Packages are the packages the repository holds (the script's default).
var Packages = []string{"hello", "figlet"}

// Repo is a served repository.
type Repo struct {
	// Host serves it; Host.Hits counts the requests apt made.
	Host *nethost.Host
	// URL is its address, http://198.18.X.Y:PORT/.
	URL string
	// Dir is the repository's directory on this machine.
	Dir string
}

// SourcesLine is the apt sources.list line that reaches the repository.
func (r *Repo) SourcesLine() string { return "deb [trusted=yes] " + r.URL + " ./" }

// UseOnly is a shell command that points the image's apt at the repository
// alone, as a Dockerfile RUN step would.
func (r *Repo) UseOnly() string {
	return "rm -f /etc/apt/sources.list.d/* && echo '" + r.SourcesLine() + "' > /etc/apt/sources.list"
}

// Serve finds the cached repository (.ci/setup builds it: building
// downloads from the machine's Debian mirror, which a test must not reach)
// and serves it until the test ends. repoRoot is the module root relative
// to the test's directory. A machine without the cached repository or a
// network namespace reports the facility missing (a failure under
// EVALSI_STRICT=1).
func Serve(t testing.TB, repoRoot string) *Repo {
	t.Helper()
	cmd := exec.Command("bash", filepath.Join(repoRoot, "scripts", "build-apt-repo.sh"), "--cached")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		testenv.Missing(t, "test package repository", "it is not built (run bash scripts/build-apt-repo.sh; .ci/setup does, with dpkg-dev and apt-utils): "+err.Error()+"\n"+stderr.String())
	}
	dir := strings.TrimSpace(string(out))
	if fi, err := os.Stat(filepath.Join(dir, "Packages")); err != nil || fi.Size() == 0 {
		t.Fatalf("build-apt-repo.sh printed %q, which holds no Packages index", dir)
	}
	h := nethost.NewHandler(t, http.FileServer(http.Dir(dir)))
	return &Repo{Host: h, URL: "http://" + h.Addr + "/", Dir: dir}
}
