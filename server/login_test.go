package server_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// Another site cannot sign a browser in with its own token: a cross-site
// post to /login is refused, a same-origin one sets the cookie.
func TestLoginRefusesCrossSite(t *testing.T) {
	f := newFixture(t, nil)
	post := func(site string) *http.Response {
		t.Helper()
		req, err := http.NewRequest("POST", f.url+"/login", strings.NewReader(url.Values{"token": {alphaEditor}}.Encode()))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Sec-Fetch-Site", site)
		c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	if r := post("cross-site"); r.StatusCode != http.StatusForbidden || len(r.Cookies()) != 0 {
		t.Errorf("cross-site login: %d, cookies %v; want 403 and none", r.StatusCode, r.Cookies())
	}
	if r := post("same-origin"); r.StatusCode != http.StatusSeeOther || len(r.Cookies()) != 1 {
		t.Errorf("same-origin login: %d, cookies %v; want 303 and the token cookie", r.StatusCode, r.Cookies())
	}
}
