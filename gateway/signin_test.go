package gateway

import (
	"bufio"
	"fmt"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"
)

// metric returns the value of the sample of the gateway's /metrics whose
// line starts with series ("rodon_gateway_signins_total{result=\"ok\"}").
func (f *fixture) metric(series string) float64 {
	f.t.Helper()
	w := f.serve(f.request(cred{}, "GET", "/metrics", ""))
	sc := bufio.NewScanner(w.Body)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), series+" "); ok {
			v, err := strconv.ParseFloat(rest, 64)
			if err != nil {
				f.t.Fatalf("metric %s: %v", sc.Text(), err)
			}
			return v
		}
	}
	return 0
}

// signinRequest builds an anonymous sign-in request.
func (f *fixture) signinReq(body, contentType, origin, addr string) *http.Request {
	r := f.request(cred{}, "POST", "/v1/auth/signin", body)
	r.Header.Set("Content-Type", contentType)
	if origin != "" {
		r.Header.Set("Origin", origin)
	}
	if addr != "" {
		r.RemoteAddr = addr
	}
	return r
}

// TestSigninFlood is issue 15's "10,000 anonymous sign-in requests
// (malformed, oversized, wrong password, rate limited) grow the
// replicated state by less than 64 KiB": every kind of bad attempt, from
// many addresses (IPv4, and IPv6 ones sharing two /64s), is counted in
// the metrics, and only attempts on an existing account, bounded by the
// per-email limit, are audited.
func TestSigninFlood(t *testing.T) {
	f := newFixture(t)
	sizeBefore, auditBefore := f.store.Size(), f.store.AuditLen()
	recordsBefore := f.store.Count(kindSignin) + f.store.Count(kindAccount)
	big := strings.Repeat("a", 60<<10) + "@example.com"
	kinds := []struct {
		name, body, ctype, origin string
	}{
		{"malformed", `{"email":`, "application/json", ""},
		{"unknown field", `{"email":"a@b.c","password":"x","remember":true}`, "application/json", ""},
		{"oversized email", `{"email":"` + big + `","password":"x"}`, "application/json", ""},
		{"long email", `{"email":"` + strings.Repeat("b", 300) + `@example.com","password":"x"}`, "application/json", ""},
		{"not an email", `{"email":"nobody","password":"x"}`, "application/json", ""},
		{"text/plain form", `{"email":"viewer@example.com","password":"x"}`, "text/plain", "http://evil.test"},
		{"cross-site json", `{"email":"viewer@example.com","password":"x"}`, "application/json", "http://evil.test"},
		{"no content type", `{"email":"viewer@example.com","password":"x"}`, "", ""},
		{"wrong password", `{"email":"viewer@example.com","password":"wrong password!"}`, "application/json", ""},
		{"unknown email", `{"email":"nobody-%d@example.com","password":"whatever it is"}`, "application/json", ""},
	}
	statuses := map[int]int{}
	const n = 10000
	start := time.Now()
	for i := range n {
		k := kinds[i%len(kinds)]
		body := k.body
		if strings.Contains(body, "%d") {
			body = fmt.Sprintf(body, i)
		}
		// 10 IPv4 addresses, and 1000 IPv6 addresses in two /64s.
		addr := fmt.Sprintf("198.51.100.%d:4000", i%10)
		if i%2 == 1 {
			addr = fmt.Sprintf("[2001:db8:0:%d::%x]:4000", i%4/2, i%1000+1)
		}
		w := f.serve(f.signinReq(body, k.ctype, k.origin, addr))
		statuses[w.Code]++
	}
	t.Logf("%d attempts in %v: %v", n, time.Since(start).Round(time.Millisecond), statuses)
	grown := f.store.Size() - sizeBefore
	audited := f.store.AuditLen() - auditBefore
	t.Logf("state grew by %d bytes, %d audit entries", grown, audited)
	if grown >= 64<<10 {
		t.Errorf("10,000 anonymous sign-ins grew the state by %d bytes, want less than 64 KiB", grown)
	}
	if got := f.store.Count(kindSignin) + f.store.Count(kindAccount); got != recordsBefore {
		t.Errorf("sign-in and account records %d, were %d: want no new record", got, recordsBefore)
	}
	if audited > DefaultSignInLimits.PerEmailBurst+2 {
		t.Errorf("%d attempts audited, want at most the per-email limit on the one existing account", audited)
	}
	var counted float64
	for _, result := range []string{"ok", "wrong", "rate_limited", "malformed", "too_large", "bad_origin", "bad_content_type", "busy"} {
		v := f.metric(`rodon_gateway_signins_total{result="` + result + `"}`)
		t.Logf("signins_total{result=%q} = %v", result, v)
		counted += v
	}
	if counted != n {
		t.Errorf("metrics count %v attempts, want %d", counted, n)
	}
	if statuses[http.StatusTooManyRequests] == 0 || statuses[http.StatusRequestEntityTooLarge] == 0 {
		t.Errorf("statuses %v: want some rate limited (429) and some too large (413)", statuses)
	}

	// Again with the per-client limit at its most, so that every attempt
	// reaches the checks of its body: nothing is recorded at all.
	f = newFixtureWith(t, func(c *Config) { c.SignIn.PerAddressBurst = MaxSignInLimits.PerAddressBurst })
	sizeBefore, auditBefore = f.store.Size(), f.store.AuditLen()
	statuses = map[int]int{}
	bad := kinds[:8] // no password is checked
	for i := range n {
		k := bad[i%len(bad)]
		w := f.serve(f.signinReq(k.body, k.ctype, k.origin, fmt.Sprintf("198.51.100.%d:4000", i%10)))
		statuses[w.Code]++
	}
	t.Logf("%d malformed attempts under the per-client limit: %v; state grew by %d bytes, %d audit entries",
		n, statuses, f.store.Size()-sizeBefore, f.store.AuditLen()-auditBefore)
	if f.store.Size() != sizeBefore || f.store.AuditLen() != auditBefore || statuses[http.StatusTooManyRequests] != 0 {
		t.Errorf("malformed sign-ins changed the state (%d -> %d bytes) or were rate limited (%v)", sizeBefore, f.store.Size(), statuses)
	}
}

// TestSigninRefusedBeforeAnyRecord: a 60 KB email, a cross-site text/plain
// form post, a foreign Origin, a body that is not JSON are refused without
// a record or an audit entry.
func TestSigninRefusedBeforeAnyRecord(t *testing.T) {
	f := newFixture(t)
	for _, tc := range []struct {
		name, body, ctype, origin, fetchSite string
		status                               int
	}{
		{"60 KB email", `{"email":"` + strings.Repeat("x", 60<<10) + `@example.com","password":"` + testPassword + `"}`, "application/json", "", "", 413},
		{"cross-site text/plain form", `{"email":"viewer@example.com","password":"` + testPassword + `"}`, "text/plain", "http://evil.test", "cross-site", 403},
		{"text/plain without origin", `{"email":"viewer@example.com","password":"` + testPassword + `"}`, "text/plain;charset=UTF-8", "", "", 415},
		{"form encoded", `email=viewer@example.com&password=x`, "application/x-www-form-urlencoded", testSite, "", 415},
		{"foreign origin", `{"email":"viewer@example.com","password":"` + testPassword + `"}`, "application/json", "null", "", 403},
		{"cross-site fetch", `{"email":"viewer@example.com","password":"` + testPassword + `"}`, "application/json", "", "cross-site", 403},
		{"email too long", `{"email":"` + strings.Repeat("x", 250) + `@example.com","password":"x"}`, "application/json", "", "", 400},
		{"password too long", `{"email":"viewer@example.com","password":"` + strings.Repeat("p", 1025) + `"}`, "application/json", "", "", 400},
	} {
		t.Run(tc.name, func(t *testing.T) {
			size, audit := f.store.Size(), f.store.AuditLen()
			r := f.signinReq(tc.body, tc.ctype, tc.origin, "")
			if tc.fetchSite != "" {
				r.Header.Set("Sec-Fetch-Site", tc.fetchSite)
			}
			w := f.serve(r)
			if w.Code != tc.status || len(w.Result().Cookies()) != 0 {
				t.Errorf("sign-in = %d %s (cookies %v), want %d and no cookie", w.Code, w.Body, w.Result().Cookies(), tc.status)
			}
			if f.store.Size() != size || f.store.AuditLen() != audit {
				t.Errorf("the state changed: %d -> %d bytes, %d -> %d audit entries", size, f.store.Size(), audit, f.store.AuditLen())
			}
		})
	}
	// The same sign-in from the site itself works.
	w := f.serve(f.signinReq(`{"email":"viewer@example.com","password":"`+testPassword+`"}`, "application/json; charset=utf-8", testSite, ""))
	if w.Code != 200 {
		t.Errorf("sign-in from the site = %d %s, want 200", w.Code, w.Body)
	}
}

// TestSigninIPv6Prefix: the per-client limit is keyed by an IPv6
// address's /64 and an IPv4 address itself.
func TestSigninIPv6Prefix(t *testing.T) {
	for _, tc := range []struct{ addr, want string }{
		{"2001:db8:1:2:3:4:5:6", "2001:db8:1:2::/64"},
		{"2001:db8:1:2::ffff", "2001:db8:1:2::/64"},
		{"198.51.100.7", "198.51.100.7"},
		{"::ffff:198.51.100.7", "198.51.100.7"},
	} {
		if got := clientKey(netip.MustParseAddr(tc.addr)); got != tc.want {
			t.Errorf("clientKey(%s) = %s, want %s", tc.addr, got, tc.want)
		}
	}
	f := newFixture(t)
	limited := false
	for i := range DefaultSignInLimits.PerAddressBurst + 1 {
		r := f.signinReq(`{"email":"nobody`+strconv.Itoa(i)+`@example.com","password":"x"}`, "application/json", "", fmt.Sprintf("[2001:db8:5:6::%x]:1", i+1))
		if w := f.serve(r); w.Code == 429 {
			limited = i == DefaultSignInLimits.PerAddressBurst
		}
	}
	if !limited {
		t.Errorf("%d attempts from one /64 were not limited at the last", DefaultSignInLimits.PerAddressBurst+1)
	}
}

// TestSigninHashingCap: password checks beyond SignInLimits.Hashing wait
// for a slot, and are answered 503 with Retry-After when none frees.
func TestSigninHashingCap(t *testing.T) {
	f := newFixtureWith(t, func(c *Config) { c.SignIn.Hashing = 2 })
	f.g.hashWait = 50 * time.Millisecond
	f.g.hashing <- struct{}{}
	f.g.hashing <- struct{}{}
	w := f.serve(f.signinReq(`{"email":"viewer@example.com","password":"`+testPassword+`"}`, "application/json", "", ""))
	if w.Code != 503 || w.Header().Get("Retry-After") == "" {
		t.Errorf("sign-in with every hashing slot busy = %d %s, want 503 with Retry-After", w.Code, w.Body)
	}
	if v := f.metric(`rodon_gateway_signins_total{result="busy"}`); v != 1 {
		t.Errorf("busy sign-ins counted %v, want 1", v)
	}
	<-f.g.hashing
	w = f.serve(f.signinReq(`{"email":"viewer@example.com","password":"`+testPassword+`"}`, "application/json", "", ""))
	if w.Code != 200 {
		t.Errorf("sign-in with a slot free = %d %s, want 200", w.Code, w.Body)
	}
}

// TestSigninSettings: each sign-in limit's default and maximum, and the
// check of its range.
func TestSigninSettings(t *testing.T) {
	want := SignInLimits{PerAddressBurst: 20, PerAddressEvery: 5 * time.Second, PerEmailBurst: 5, PerEmailEvery: 30 * time.Second, Hashing: 4}
	if DefaultSignInLimits != want || DefaultConfig().SignIn != want {
		t.Errorf("default sign-in limits %+v, want %+v", DefaultSignInLimits, want)
	}
	if err := MaxSignInLimits.Check(); err != nil {
		t.Errorf("MaxSignInLimits.Check() = %v", err)
	}
	for _, tc := range []struct {
		edit func(*SignInLimits)
		want string
	}{
		{func(l *SignInLimits) { l.PerAddressBurst = 0 }, "signin-per-address-burst 0"},
		{func(l *SignInLimits) { l.PerAddressBurst = 1001 }, "signin-per-address-burst 1001"},
		{func(l *SignInLimits) { l.PerEmailBurst = 101 }, "signin-per-email-burst 101"},
		{func(l *SignInLimits) { l.Hashing = 65 }, "signin-hashing 65"},
		{func(l *SignInLimits) { l.PerAddressEvery = time.Millisecond }, "signin-per-address-every 1ms"},
		{func(l *SignInLimits) { l.PerEmailEvery = 2 * time.Hour }, "signin-per-email-every 2h0m0s"},
	} {
		l := DefaultSignInLimits
		tc.edit(&l)
		if err := l.Check(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Check(%+v) = %v, want an error naming %q", l, err, tc.want)
		}
	}
	if maxSigninBody != 4<<10 || maxEmail != 254 || maxPassword != 1024 {
		t.Errorf("sign-in bounds: body %d, email %d, password %d; want 4 KiB, 254, 1024", maxSigninBody, maxEmail, maxPassword)
	}
}
