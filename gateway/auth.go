package gateway

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"mime"
	"net/http"
	"net/netip"
	"strings"
	"time"

	"github.com/rodon-compute/rodon/api"
)

// errWrongPassword is the one answer to a failed sign-in, whether the
// email is unknown or the password wrong.
var errWrongPassword = unauthorized("email or password is wrong")

// Bounds of a sign-in request, checked before anything is recorded.
const (
	maxSigninBody = 4 << 10
	maxEmail      = 254
	maxPassword   = 1024
	// hashWait is how long a sign-in waits for a password check slot
	// (SignInLimits.Hashing) before it is answered 503.
	hashWait = 2 * time.Second
)

// SignInLimits bound sign-in attempts (docs/GATEWAY.md, "Sign-in").
type SignInLimits struct {
	// PerAddressBurst attempts from one client (an IPv4 address, or an
	// IPv6 /64), and one more every PerAddressEvery; checked before the
	// request is read.
	PerAddressBurst int
	PerAddressEvery time.Duration
	// PerEmailBurst attempts for one email, and one more every
	// PerEmailEvery; checked once the email is read and valid.
	PerEmailBurst int
	PerEmailEvery time.Duration
	// Hashing caps the password checks (argon2id, 19 MiB each) running
	// at once over every client; an attempt that finds none free within
	// 2 s is answered 503.
	Hashing int
}

// DefaultSignInLimits and MaxSignInLimits are the defaults and largest
// values of `gateway serve`'s --signin-* flags; the refills are at least
// MinSignInEvery.
var (
	DefaultSignInLimits = SignInLimits{PerAddressBurst: 20, PerAddressEvery: 5 * time.Second,
		PerEmailBurst: 5, PerEmailEvery: 30 * time.Second, Hashing: 4}
	MaxSignInLimits = SignInLimits{PerAddressBurst: 1000, PerAddressEvery: time.Hour,
		PerEmailBurst: 100, PerEmailEvery: time.Hour, Hashing: 64}
)

// MinSignInEvery is the shortest refill of a sign-in limit.
const MinSignInEvery = 10 * time.Millisecond

// Check reports the first limit out of its range, naming its flag.
func (l SignInLimits) Check() error {
	for _, c := range []struct {
		flag   string
		v, max int
	}{
		{"signin-per-address-burst", l.PerAddressBurst, MaxSignInLimits.PerAddressBurst},
		{"signin-per-email-burst", l.PerEmailBurst, MaxSignInLimits.PerEmailBurst},
		{"signin-hashing", l.Hashing, MaxSignInLimits.Hashing},
	} {
		if c.v < 1 || c.v > c.max {
			return fmt.Errorf("%s %d: want 1 to %d", c.flag, c.v, c.max)
		}
	}
	for _, c := range []struct {
		flag   string
		v, max time.Duration
	}{
		{"signin-per-address-every", l.PerAddressEvery, MaxSignInLimits.PerAddressEvery},
		{"signin-per-email-every", l.PerEmailEvery, MaxSignInLimits.PerEmailEvery},
	} {
		if c.v < MinSignInEvery || c.v > c.max {
			return fmt.Errorf("%s %v: want %v to %v", c.flag, c.v, MinSignInEvery, c.max)
		}
	}
	return nil
}

// signinRefused counts a sign-in refused before any record (result is
// the metric's label) and returns err: such attempts are counted, never
// audited one by one, so that anonymous traffic cannot grow the state.
func (g *Gateway) signinRefused(result string, err error) error {
	g.metrics.signins.WithLabelValues(result).Inc()
	return err
}

func (g *Gateway) handleSignin(c *call) error {
	// The client's budget first, before the request is read at all.
	if ok, wait := g.signinByAddr.take(clientKey(clientAddr(c.r))); !ok {
		return g.signinRefused("rate_limited", rateLimited(wait))
	}
	// A browser sends Origin with every POST: refuse a sign-in form
	// posted from another site (login CSRF), and anything but JSON, which
	// no cross-site form can send without a preflight.
	if o := c.r.Header.Get("Origin"); o != "" && o != g.cfg.Site || c.r.Header.Get("Sec-Fetch-Site") == "cross-site" {
		return g.signinRefused("bad_origin", forbidden("sign-in from origin %q: only this gateway's site %s may sign in", truncateText(o, 100), g.cfg.Site))
	}
	if mt, _, err := mime.ParseMediaType(c.r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
		return g.signinRefused("bad_content_type", &httpError{Status: http.StatusUnsupportedMediaType, Code: codeUnsupportedMedia,
			Message: "sign-in takes Content-Type: application/json"})
	}
	var req api.SignInRequest
	if err := decodeBodyMax(c.w, c.r, &req, maxSigninBody); err != nil {
		result := "malformed"
		if he, ok := err.(*httpError); ok && he.Status == http.StatusRequestEntityTooLarge {
			result = "too_large"
		}
		return g.signinRefused(result, err)
	}
	email := normalizeEmail(req.Email)
	if email == "" || req.Password == "" {
		return g.signinRefused("malformed", badRequest("email and password are required"))
	}
	if len(email) > maxEmail || len(req.Password) > maxPassword {
		return g.signinRefused("malformed", badRequest("email or password too long: at most %d and %d bytes", maxEmail, maxPassword))
	}
	if err := checkEmail(email); err != nil {
		return g.signinRefused("malformed", badRequest("field \"email\": want an address such as ada@example.com"))
	}
	if ok, wait := g.signinByEmail.take(email); !ok {
		return g.signinRefused("rate_limited", rateLimited(wait))
	}
	var person personRecord
	_, err := getRecord(c.ctx, g.store, kindPerson, accountID(email), &person)
	if err != nil && !IsNotFound(err) {
		return err
	}
	known := err == nil
	hash := dummyHash() // as slow as a real check
	if known {
		hash = person.PasswordHash
	}
	ok, err := g.checkPasswordBounded(c.ctx, hash, req.Password)
	if err != nil {
		return g.signinRefused("busy", err)
	}
	if !known {
		return g.signinRefused("wrong", errWrongPassword)
	}
	// An existing person's attempts are audited: at most the per-email
	// limit of them, naming the person's (valid, bounded) email.
	c.target, c.auditWho = email, person.ID
	c.auditCred = &api.CredentialRef{Kind: "password"}
	// The tenant the sign-in acts in, also for a wrong password's audit
	// entry (with the role there).
	tenant, a, version, terr := g.signinTenant(c.ctx, &person)
	if terr == nil {
		c.ctx = withTenant(c.ctx, tenant)
		c.auditRole = a.Role.String()
	}
	if !ok {
		g.metrics.signins.WithLabelValues("wrong").Inc()
		return errWrongPassword
	}
	if terr != nil {
		return terr
	}
	if a.Generation == "" {
		// A member from before generations: give it one.
		a.Generation = newGeneration()
		if _, err := putRecord(c.ctx, g.store, kindAccount, a.ID, version, &a); err != nil {
			if IsConflict(err) {
				return errUnavailable
			}
			return err
		}
	}
	tokb := make([]byte, 32)
	rand.Read(tokb)
	tok := base64.RawURLEncoding.EncodeToString(tokb)
	now := g.now()
	s := signinRecord{Account: a.ID, Tenant: tenant, Generation: a.Generation, CreatedAt: now, ExpiresAt: now.Add(g.cfg.SessionTTL)}
	sid := digest(tok)
	if _, err := putRecord(c.ctx, g.store, kindSignin, sid, 0, &s); err != nil {
		return err
	}
	c.auditCred = &api.CredentialRef{Kind: "session", ID: sessionRef(sid)}
	g.metrics.signins.WithLabelValues("ok").Inc()
	g.rememberTenant(c.ctx, person.ID, tenant)
	http.SetCookie(c.w, &http.Cookie{
		Name: cookieName, Value: tok, Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode,
		Secure: g.secureCookie, Expires: s.ExpiresAt, MaxAge: int(g.cfg.SessionTTL / time.Second),
	})
	return c.json(http.StatusOK, api.SignInAnswer{Account: a.public(), CSRFToken: csrfToken(tok)})
}

// rateLimited is the answer to an attempt over a limit.
func rateLimited(wait time.Duration) error {
	return &httpError{Status: http.StatusTooManyRequests, Code: codeRateLimited,
		Message:    fmt.Sprintf("too many sign-in attempts: retry in %s", max(wait, time.Second).Round(time.Second)),
		RetryAfter: max(wait, time.Second)}
}

// checkPasswordBounded checks password against hash in one of the
// SignInLimits.Hashing slots, waiting at most hashWait for one.
func (g *Gateway) checkPasswordBounded(ctx context.Context, hash, password string) (bool, error) {
	t := time.NewTimer(g.hashWait)
	defer t.Stop()
	select {
	case g.hashing <- struct{}{}:
	case <-t.C:
		return false, &httpError{Status: http.StatusServiceUnavailable, Code: api.CodeUnavailable,
			Message: "too many sign-ins at once: retry shortly", RetryAfter: time.Second}
	case <-ctx.Done():
		return false, ctx.Err()
	}
	defer func() { <-g.hashing }()
	return checkPassword(hash, password), nil
}

// clientKey is the rate limit key of a client address: an IPv4 address
// itself, an IPv6 address's /64 (what one host or one customer is given).
func clientKey(a netip.Addr) string {
	a = a.Unmap()
	if a.Is6() {
		p, _ := a.Prefix(64)
		return p.String()
	}
	return a.String()
}

func (g *Gateway) handleSignout(c *call) error {
	ck, err := c.r.Cookie(cookieName)
	if err != nil || c.p.key != nil {
		return badRequest("sign out needs the %s cookie", cookieName)
	}
	sid := digest(ck.Value)
	c.target = c.p.cred.ID
	rec, err := g.store.GetRecord(c.ctx, kindSignin, sid)
	if err == nil {
		err = g.store.DeleteRecord(c.ctx, kindSignin, sid, rec.Version)
	}
	if err != nil && !IsNotFound(err) {
		return err
	}
	http.SetCookie(c.w, &http.Cookie{Name: cookieName, Value: "", Path: "/", HttpOnly: true,
		SameSite: http.SameSiteStrictMode, Secure: g.secureCookie, MaxAge: -1})
	c.w.WriteHeader(http.StatusNoContent)
	return nil
}

func (g *Gateway) handleMe(c *call) error {
	out := api.Me{Role: c.p.Role, Workspaces: orEmpty(c.p.Workspaces), CSRFToken: c.p.csrf}
	if c.p.account != nil {
		a := c.p.account.public()
		out.Account = &a
	}
	if c.p.key != nil {
		k := c.p.key.public()
		out.Key = &k
	}
	var t tenantRecord
	if _, err := getRecord(c.ctx, g.store, kindTenant, c.p.tenant, &t); err != nil && !IsNotFound(err) {
		return err
	} else if err == nil {
		pt := t.public(c.p.Role, true)
		out.Tenant = &pt
	}
	return c.json(http.StatusOK, out)
}

func (a *accountRecord) public() api.Account {
	return api.Account{ID: a.ID, Email: a.Email, Role: a.Role, Workspaces: orEmpty(a.Workspaces), CreatedAt: a.CreatedAt}
}

func (k *keyRecord) public() api.Key {
	return api.Key{ID: k.ID, Name: k.Name, Role: k.Role, Workspaces: orEmpty(k.Workspaces), CreatedAt: k.CreatedAt, LastUsedAt: k.LastUsedAt}
}

func orEmpty(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// checkEmail checks the form of an email address (not that it exists).
func checkEmail(email string) error {
	e := normalizeEmail(email)
	at := strings.LastIndexByte(e, '@')
	if at < 1 || at == len(e)-1 || len(e) > 254 || strings.ContainsAny(e, " \t\r\n\"<>,;") {
		return fmt.Errorf("email %q: want an address such as ada@example.com", email)
	}
	return nil
}
