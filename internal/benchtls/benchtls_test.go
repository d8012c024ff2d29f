package benchtls

import (
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"

	"github.com/rodon-compute/rodon/internal/pki"
	"github.com/rodon-compute/rodon/internal/pki/pkitest"
)

func TestModeArguments(t *testing.T) {
	tlsMode, plain := Mode{Dir: "/d", EnvKey: "/d/env-key.json"}, Mode{EnvKey: "/d/env-key.json"}
	for _, tc := range []struct {
		mode                 Mode
		flags, schedFlags    []string
		url, short, tlsInEnv string
	}{
		{tlsMode, []string{"--tls-dir", "/d"}, []string{"--tls-dir", "/d", "--env-key", "/d/env-key.json"}, "https://h:1", "tls", "RODON_TLS_DIR=/d"},
		{plain, []string{"--plaintext"}, []string{"--plaintext", "--env-key", "/d/env-key.json"}, "http://h:1", "plain", ""},
	} {
		t.Run(tc.mode.String(), func(t *testing.T) {
			if got := tc.mode.Flags(); !slices.Equal(got, tc.flags) {
				t.Errorf("Flags() = %q, want %q", got, tc.flags)
			}
			if got := tc.mode.SchedulerFlags(); !slices.Equal(got, tc.schedFlags) {
				t.Errorf("SchedulerFlags() = %q, want %q", got, tc.schedFlags)
			}
			if got := tc.mode.URL("h:1"); got != tc.url {
				t.Errorf("URL(h:1) = %q, want %q", got, tc.url)
			}
			if got := tc.mode.Short(); got != tc.short {
				t.Errorf("Short() = %q, want %q", got, tc.short)
			}
			t.Setenv("RODON_TLS_DIR", "/elsewhere")
			var dirs []string
			for _, e := range tc.mode.Env("X=1") {
				if strings.HasPrefix(e, "RODON_TLS_DIR=") {
					dirs = append(dirs, e)
				}
			}
			if want := slices.DeleteFunc([]string{tc.tlsInEnv}, func(s string) bool { return s == "" }); !slices.Equal(dirs, want) {
				t.Errorf("Env() has %q, want %q", dirs, want)
			}
		})
	}
}

// TestClientActsAsIdentity checks that a TLS mode's client presents the
// identity it is given and that the plaintext one speaks plain HTTP.
func TestClientActsAsIdentity(t *testing.T) {
	ca := pkitest.New(t)
	mode := Mode{Dir: ca.Dir, ca: ca.CA}
	op := pki.Identity{Role: pki.RoleOperator, Name: "bench"}
	if err := mode.Issue([]pki.Identity{op}); err != nil {
		t.Fatal(err)
	}
	member := ca.Source(t, pki.RoleMember, "m1")
	answer := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, _ := pki.PeerIdentity(r.TLS)
		io.WriteString(w, id.String())
	})
	srv := httptest.NewUnstartedServer(answer)
	srv.TLS = member.ServerConfig(pki.AnyIdentity)
	srv.StartTLS()
	defer srv.Close()
	plainSrv := httptest.NewServer(answer)
	defer plainSrv.Close()

	for _, tc := range []struct {
		mode Mode
		url  string
		want string
	}{
		{mode, srv.URL, "operator/bench"},
		{Mode{}, plainSrv.URL, "/"}, // no TLS: the zero identity
	} {
		tr, err := tc.mode.Transport(op, pki.AllowRoles(pki.RoleMember))
		if err != nil {
			t.Fatal(err)
		}
		resp, err := (&http.Client{Transport: tr}).Get(tc.url)
		if err != nil {
			t.Fatalf("%s: GET %s: %v", tc.mode, tc.url, err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		tr.CloseIdleConnections()
		if string(b) != tc.want {
			t.Errorf("%s: the server saw %q, want %q", tc.mode, b, tc.want)
		}
	}
}
